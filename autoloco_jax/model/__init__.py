"""The model: a decoder-only transformer behind a pure ``init``/``apply`` API.
Imports nothing else of the package."""
