"""SGLang's own RadixCache on the CPU, its classes compiled from the installed source.

``sglang.srt.mem_cache.radix_cache`` and ``base_prefix_cache`` import the GPU stack when
they load, so neither can be imported here. Their classes (``RadixKey``, ``TreeNode``,
``RadixCache``, the params and result dataclasses, the LRU strategy) are read from the
installed files and compiled into one namespace that supplies what they would have
imported: no KV events, no metrics, the LRU strategy, and ``time.monotonic`` replaced by
a counter, so recency is strictly increasing (kvbench's tree ticks a logical clock at the
same points, memory/tree/radix_cache.py). ``kvbench conform`` (harness/conform/tree.py) and
the side-by-side tests (suites/unit/conform/) build their trees from it.

Both releases kvbench conforms against build here, each from its own source. Their trees
run match, insert, lock, unlock and evict by the same code; what differs is around it:
0.5.18's RadixCache takes its KV events from a mixin (``KVCacheEventMixin``, 0.5.23: a
``KVCacheEventRecorder`` member), reads ``disable_finished_insert`` from its params, asks
``get_eviction_strategy`` with the policy name alone, and its match result carries the
matched slots (``device_indices``) where 0.5.23's carries their count
(``device_prefix_len``): ``matched_len`` reads either.
"""

from __future__ import annotations

import __future__
import abc
import ast
import collections
import dataclasses
import heapq
import importlib.util
import itertools
import logging
import sys
from array import array
from pathlib import Path
from types import SimpleNamespace
from typing import Any, NamedTuple, Optional, Sequence

BASE = "sglang.srt.mem_cache.base_prefix_cache"
TREE = "sglang.srt.mem_cache.radix_cache"
POLICY = "sglang.srt.mem_cache.evict_policy"


def compile_classes(module: str, names: set[str], namespace: dict) -> dict:
    """The named top-level classes of ``module`` (decorators kept), compiled into ``namespace``.

    The module's ``from __future__ import annotations`` is applied, so annotations naming
    types the namespace does not hold stay strings, as in the module itself. A class the
    module no longer defines is an AssertionError naming them.
    """
    origin = importlib.util.find_spec(module).origin
    body = [n for n in ast.parse(Path(origin).read_text()).body if isinstance(n, ast.ClassDef) and n.name in names]
    assert {n.name for n in body} == names, f"{module} no longer defines {names}"
    code = compile(ast.Module(body=body, type_ignores=[]), origin, "exec",
                   flags=__future__.annotations.compiler_flag, dont_inherit=True)
    exec(code, namespace)
    return namespace


class _NoEvents:
    def __init__(self, **kwargs):
        pass

    def __getattr__(self, name):
        return lambda *a, **k: None


class _NoEventsMixin:  # 0.5.18's KVCacheEventMixin, with events off: records nothing
    def _record_store_event(self, node, medium=None):
        pass

    def _record_remove_event(self, node, medium=None):
        pass

    def _record_all_cleared_event(self):
        pass


class _Base:  # what RadixCache takes from BasePrefixCache on this path
    def update_eviction_metrics(self, num_evicted, start_time):
        pass

    def lock(self, node):
        return self.inc_lock_ref(node)


def radix_namespace(torch) -> dict:
    """SGLang's RadixKey, TreeNode, RadixCache and their params and results, by name."""
    from sglang.srt.mem_cache.unified_cache.component_type import ComponentType  # sglang: optional, heavy

    ns = compile_classes(BASE, {"MatchPrefixParams", "InsertParams", "InsertResult", "EvictParams", "EvictResult",
                                "IncLockRefResult", "DecLockRefParams", "DecLockRefResult", "MatchResult"},
                         {"dataclasses": dataclasses, "NamedTuple": NamedTuple, "Optional": Optional, "Any": Any,
                          "Sequence": Sequence, "torch": torch, "ComponentType": ComponentType})
    policy = compile_classes(POLICY, {"EvictionStrategy", "LRUStrategy"},
                             {"ABC": abc.ABC, "abstractmethod": abc.abstractmethod})
    clock = itertools.count(1)
    ns.update({
        "heapq": heapq, "sys": sys, "array": array, "defaultdict": collections.defaultdict, "torch": torch,
        "logger": logging.getLogger("sglang-radix"), "Optional": Optional, "Any": Any,
        "time": SimpleNamespace(monotonic=lambda: float(next(clock)), perf_counter=lambda: 0.0),
        "BasePrefixCache": _Base, "KVCacheEventRecorder": _NoEvents, "LoRANameTable": object,
        "KVCacheEventMixin": _NoEventsMixin,  # 0.5.18's
        "get_eviction_strategy": lambda name, config=None: policy["LRUStrategy"](),
        "split_node_hash_value": lambda h, n, ps: (None, None), "CacheInitParams": object,
    })
    return compile_classes(TREE, {"RadixKey", "TreeNode", "RadixCache"}, ns)


def radix_cache(ns: dict, page_size: int, allocator, *, bigram: bool = False):
    """SGLang's RadixCache (LRU, no events, no metrics) freeing its evicted leaves into allocator;
    bigram: EAGLE's keys (SGLang's is_eagle)."""
    params = SimpleNamespace(disable=False, req_to_token_pool=None, token_to_kv_pool_allocator=allocator,
                             page_size=page_size, is_eagle=bigram, eviction_policy="lru",
                             eviction_policy_config=None, enable_kv_cache_events=False,
                             dynamo_kv_event_format=False, kv_event_lora_names=None, enable_metrics=False,
                             disable_finished_insert=False)
    return ns["RadixCache"](params)


def matched_len(result) -> int:
    """The matched length of a match_prefix result: 0.5.23's count, or 0.5.18's slots counted."""
    n = getattr(result, "device_prefix_len", None)
    return len(result.device_indices) if n is None else n
