"""Compression: the codecs of exchanged pseudo-gradients and error feedback,
one interface for every algorithm. Imports nothing else of the package."""
