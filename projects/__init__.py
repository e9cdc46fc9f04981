"""Side projects built on the core machinery (replica axis, inner loop, round
driver), kept out of the installed core package (big_vision's ``projects/``):
``plora`` (packed LoRA sweeps). They run from a checkout of the repository."""
