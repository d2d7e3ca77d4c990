"""Host-side KV planning: allocator, req_to_token, request KV state, sizing, SWA, PD, invariants, trace."""

from importlib import import_module

# The names below load on first use, not with the package: the vocabulary modules
# (rules, config) must import without numpy, so that the CLI can build its parser (which
# lists the engine's choices) on an install without the engine role and say so in one line.
_EXPORTS = {
    "Auditor": "audit.record", "Violation": "audit.record", "KVManager": "manager",
    "MemoryConfig": "config", "PagedAllocator": "pool.allocator", "ReqKVState": "kv_state",
    "ReqToTokenPool": "pool.req_to_token", "TraceWriter": "trace.writer",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    globals()[name] = value
    return value
