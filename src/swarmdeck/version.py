"""The package's version, in a module of its own: the lowest layers name it without
importing the package's root, which reaches up to the SDK."""

__version__ = "0.1.0"
