"""Host-side KV planning: allocator, req_to_token, request KV state, sizing, SWA, PD, invariants, trace."""

from mini_engine.memory.allocator import PagedAllocator
from mini_engine.memory.config import MemoryConfig
from mini_engine.memory.invariants import Auditor, Violation
from mini_engine.memory.kv_state import ReqKVState
from mini_engine.memory.manager import KVManager
from mini_engine.memory.req_to_token import ReqToTokenPool
from mini_engine.memory.trace import TraceWriter

__all__ = ["Auditor", "KVManager", "MemoryConfig", "PagedAllocator", "ReqKVState",
           "ReqToTokenPool", "TraceWriter", "Violation"]
