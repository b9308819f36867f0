"""The package version, on the ground floor: every layer may read it without importing the package root."""

__version__ = "0.1.0"
