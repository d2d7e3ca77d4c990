"""What one run is, read once when the engine is built: the option schema
(option, options), the accounting profiles, the model shapes (torch-free), what a
config asks of the pools, and EngineConfig, which checks them together."""

from mini_engine.config.engine_config import EngineConfig, load_toml, read_tables

__all__ = ["EngineConfig", "load_toml", "read_tables"]
