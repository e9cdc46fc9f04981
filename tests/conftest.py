"""Test setup: four simulated CPU devices so sharded and vmapped runs can be compared."""
import os
import tempfile

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=4")
os.environ.setdefault("JAX_PLATFORMS", "cpu")
# The embedded dataset is built once per test session into a fresh folder
# (about a second), never into the user's cache.
os.environ.setdefault("AUTOLOCO_DATA_DIR", tempfile.mkdtemp(prefix="autoloco_tfds_"))
