"""The binding's version: always the version of the C library it was released with (tests/python checks
that it equals bptrain.version() of the library it loads, and pyproject.toml reads it from here)."""
__version__ = "0.1.0"
