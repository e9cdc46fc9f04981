"""Test setup: four simulated CPU devices so sharded and vmapped runs can be compared."""
import os

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=4")
os.environ.setdefault("JAX_PLATFORMS", "cpu")
