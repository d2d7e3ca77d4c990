"""mini_engine: a compact serving engine for studying paged KV accounting."""

__version__ = "0.1.0"
