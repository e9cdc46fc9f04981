"""Compression: the codecs of exchanged pseudo-gradients, error feedback and
the encoded payloads on the wire, one interface for every algorithm. Imports
``ranges`` and the replica axis (``runtime.replicas``) of the package."""
