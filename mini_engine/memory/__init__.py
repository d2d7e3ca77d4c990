"""Host-side KV planning, numpy only: KVManager (manager.py) over the shared KVTables, in parts.

pool/ holds the slots (allocators, free order, SWA pool, req_to_token rows, page ledger);
extents/ a request's extent and its writers (growth, overflow, SWA cursor, release);
tree/ the radix prefix caches; audit/ the violation record and the checks K1-K14;
trace/ the trace file's writer and reader; replay/ a trace run again.

The package imports nothing itself: importers name the module (``from
mini_engine.memory.manager import KVManager``), so the vocabulary modules (rules.py,
config.py) load without numpy and the CLI can build its parser, which lists the
engine's choices, on an install without the engine role.
"""
