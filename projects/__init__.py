"""Side projects built on the core machinery (replica axis, inner loop, round
driver), kept out of the core package: ``plora`` (packed LoRA sweeps)."""
