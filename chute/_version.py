"""The chute version, in a module of its own so any layer can name it without importing the
package facade (chute/__init__.py, which reaches every layer lazily)."""

__all__ = ["__version__"]

__version__ = "0.1.0"
