"""The run: the trainer's loop, resume and checkpoints, evaluation, metrics,
config checks, provenance and many-host start-up. The top layer: it imports
every other, and nothing of the package imports it."""
