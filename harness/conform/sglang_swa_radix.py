"""SGLang's own UnifiedRadixCache, built on a CPU: with the FULL and SWA components
(``build``) ``kvbench conform`` replays an SWA run's tree records on it
(harness/conform/swa_tree.py); with the FULL component only (``build_full``, the tree
0.5.23 builds for a full-attention model) a full-attention run's (harness/conform/tree.py).
The side-by-side tests (suites/unit/conform/) drive both call by call.

unified_radix_cache.py imports the whole serving stack at load time (the scheduler's
batch types, the OpenAI protocol, model configs). Nothing on the tree's path uses
those, but several of the modules they pull in need packages a CPU install lacks
(torchvision, sentencepiece, gguf, ...), or run code at import that fails without
them. So the import runs with stand-ins for exactly those modules (STAND_INS: an empty
module whose every attribute is an inert class) and the tree's own modules are the
installed ones, unchanged. The tree runs on SGLang's SWATokenToKVPoolAllocator over a
stand-in KV pool that only holds the full -> SWA map, with the Python tree core
(SGLang's Rust core is its default where built; the Python core is its fallback and
the reference the Rust one is tested against).

Both releases kvbench conforms against build here. 0.5.18 instantiates the same class
for a hybrid SWA model with a full-attention pool (mem_cache/registry.py,
``_create_unified_radix_cache``) and takes the same five calls, spelled differently
around them: the insert's SWA cursor is ``swa_evicted_seqlen`` (0.5.23:
``component_evicted_seqlens``), a lock's receipt is ``swa_uuid_for_lock`` and
``skip_lock_node_ids`` (0.5.23: ``component_lock_uuids``), its match result carries the
matched slots (``device_indices``, 0.5.23: their count), it picks its tree core from an
environment variable (Python by default) and its import chain reaches two more modules a
CPU install lacks. Its tree core also orders the SWA LRU otherwise after a split and
passes over tombstones in its SWA lock: kvbench's tree models both by release
(mini_engine/memory/tree/swa_radix.py, swa_locks.py). The namespace ``load`` returns hides those differences (``insert_params``,
``unlock_params``, ``matched_len``).
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.abc
import importlib.machinery
import os
import sys
import types
import warnings
from types import SimpleNamespace

# Modules the import chain reaches but the tree never calls (each named for why).
STAND_INS = (
    "torchvision",  # transformers' image utils, the OCR configs
    "tvm_ffi",  # the custom all-reduce kernels
    "sentencepiece",  # tokenizer configs
    "compressed_tensors",  # quantization configs
    "gguf",  # the GGUF loader
    "partial_json_parser",  # function-call parsers
    "dill",  # the custom logit processor (serialises at import time)
    "sglang.srt.configs.deepseek_ocr",  # builds torchvision transforms at import
    "sglang.srt.configs.unlimited_ocr",  # imports deepseek_ocr
    "sglang.srt.entrypoints.openai.protocol",  # pydantic models over the openai package
    "sglang.srt.configs.qwen3_asr",  # 0.5.18: registers a config name newer transformers already has
    "xgrammar",  # 0.5.18: the function-call parser's structural tags
)


class _Inert(type):
    def __getattr__(cls, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Inert(name, (), {})


class _StandIns(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self, names: tuple = STAND_INS):
        self.names = names

    def find_spec(self, name, path, target=None):
        if any(name == s or name.startswith(s + ".") for s in self.names):
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        mod = types.ModuleType(spec.name)
        mod.__path__, mod.__file__, mod.__version__ = [], f"<stand-in {spec.name}>", "0.0"

        def attr(name):
            if name.startswith("__"):
                raise AttributeError(name)
            return _Inert(name, (), {})

        mod.__getattr__ = attr
        return mod

    def exec_module(self, module):
        pass


def stand_in(names: tuple) -> None:
    """Import ``names`` (and their submodules) as inert stand-ins from now on, once."""
    if not any(isinstance(f, _StandIns) and f.names == names for f in sys.meta_path):
        sys.meta_path.insert(0, _StandIns(names))


def load() -> SimpleNamespace:
    """The tree's classes and a builder (ImportError, or the error a module raised at
    import, when SGLang cannot load)."""
    # torch's data utilities probe for dill themselves: load them before the stand-in exists.
    import torch  # torch: optional, loaded only when the tree is built
    import torch.utils.data  # noqa: F401  (torch: optional, its data utilities before the stand-in)

    stand_in(STAND_INS)
    os.environ.setdefault("TRITON_INTERPRET", "1")
    m = _modules()
    init_fields = {f.name for f in dataclasses.fields(m.params.CacheInitParams)}
    FULL, SWA = m.ct.ComponentType.FULL, m.ct.ComponentType.SWA
    MapOnlyPool = _map_only_pool(m.pool)

    def tree(allocator, ps: int, components: tuple, bigram: bool, req_to_token_pool=None, disable: bool = False,
             **extra):
        """bigram: EAGLE's keys (SGLang's is_eagle, which its tree core turns every key into);
        req_to_token_pool: the rows a scheduler's tree reads (the reference engine's);
        disable: SGLang's --disable-radix-cache (the chunk cache's tree)."""
        # The Python tree core: 0.5.23 takes it as a parameter, 0.5.18 from its environment
        # variable, whose default it is.
        core = {"tree_core_backend": "python"} if "tree_core_backend" in init_fields else {}
        p = m.params.CacheInitParams(disable=disable, req_to_token_pool=req_to_token_pool,
                                     token_to_kv_pool_allocator=allocator,
                                     page_size=ps, tree_components=components,
                                     **({"is_eagle": True} if bigram else {}), **core, **extra)
        return m.urc.UnifiedRadixCache(p)

    def build(full_pages: int, swa_pages: int, ps: int, window: int, bigram: bool = False, **extra):
        """The FULL + SWA tree, over SGLang's SWA allocator (returned with it); extra: tree()'s
        req_to_token_pool and disable."""
        alloc = m.swa_alloc.SWATokenToKVPoolAllocator(full_pages * ps, swa_pages * ps, ps, torch.int64, "cpu",
                                                      MapOnlyPool(), False)
        return alloc, tree(alloc, ps, (FULL, SWA), bigram, sliding_window_size=window, **extra)

    def build_full(ps: int, allocator, bigram: bool = False):
        """The FULL-only UnifiedRadixCache 0.5.23 builds for a full-attention model
        (registry.create_unified_radix_cache), freeing into allocator (free_segment)."""
        return tree(allocator, ps, (FULL,), bigram)

    return SimpleNamespace(torch=torch, tree=tree, build=build, build_full=build_full, base=m.base, FULL=FULL,
                           SWA=SWA, RadixKey=m.radix.RadixKey, **_version_adapters(m.base, SWA))


def _modules() -> SimpleNamespace:
    """SGLang's modules the tree needs, imported behind the stand-ins."""
    # The import chain's modules warn that a CPU has no AWQ, GGUF, ... kernels: noise before
    # any result (a conform run's one-line output), about code the tree never calls.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return SimpleNamespace(
            base=importlib.import_module("sglang.srt.mem_cache.base_prefix_cache"),
            urc=importlib.import_module("sglang.srt.mem_cache.unified_radix_cache"),
            swa_alloc=importlib.import_module("sglang.srt.mem_cache.allocator.swa"),
            pool=importlib.import_module("sglang.srt.mem_cache.base_swa_memory_pool"),
            params=importlib.import_module("sglang.srt.mem_cache.cache_init_params"),
            ct=importlib.import_module("sglang.srt.mem_cache.unified_cache.component_type"),
            radix=importlib.import_module("sglang.srt.mem_cache.radix_cache"),
        )


def _map_only_pool(pool) -> type:
    """The KV pool class the allocator talks to, over SGLang's BaseSWAKVPool."""

    class MapOnlyPool(pool.BaseSWAKVPool):
        """The KV pool the allocator talks to: only the full -> SWA map (no buffers on a CPU test)."""

        def __init__(self):
            self.full_kv_pool = self.swa_kv_pool = None
            self.swa_req_ring_size = None
            self.full_to_swa_index_mapping = None

        def register_mapping(self, mapping):
            self.full_to_swa_index_mapping = mapping

        def translate_loc_from_full_to_swa(self, kv_indices):
            return self.full_to_swa_index_mapping[kv_indices]

        def _no_buffers(self, *args, **kwargs):
            raise AssertionError("the tree test has no KV buffers")

        get_kv_buffer = get_key_buffer = get_value_buffer = set_kv_buffer = get_state_buf_infos = _no_buffers

    return MapOnlyPool


def _version_adapters(base, SWA) -> dict:
    """The calls whose spelling differs between 0.5.18 and 0.5.23, each in one form."""
    insert_fields = {f.name for f in dataclasses.fields(base.InsertParams)}

    def insert_params(key, value, prev_prefix_len: int, swa_evicted_seqlen: int):
        if "component_evicted_seqlens" in insert_fields:  # 0.5.23
            cursor = {"component_evicted_seqlens": {SWA: swa_evicted_seqlen}}
        else:
            cursor = {"swa_evicted_seqlen": swa_evicted_seqlen}
        return base.InsertParams(key=key, value=value, prev_prefix_len=prev_prefix_len, **cursor)

    def unlock_params(node, receipt):
        """What dec_lock_ref takes back from the inc_lock_ref result it releases."""
        if hasattr(receipt, "to_dec_params"):  # 0.5.23: its own conversion (tree.FullUnified's too)
            return receipt.to_dec_params()
        return base.DecLockRefParams(swa_uuid_for_lock=receipt.swa_uuid_for_lock,
                                     skip_lock_node_ids=receipt.skip_lock_node_ids)

    def release_swa(tree, node, params) -> None:
        """The early release of a lock's SWA part: 0.5.23's UnifiedRadixCache.release_swa on
        a TreeLock; 0.5.18's own dec_swa_lock_only, which takes the receipt's fields."""
        tree_lock = getattr(base, "TreeLock", None)
        if tree_lock is not None and hasattr(tree, "release_swa"):
            tree.release_swa(tree_lock(node, params))
        else:
            tree.dec_swa_lock_only(node, params.swa_uuid_for_lock, skip_lock_node_ids=params.skip_lock_node_ids)

    def matched_len(result) -> int:
        n = getattr(result, "device_prefix_len", None)
        return len(result.device_indices) if n is None else n

    return dict(insert_params=insert_params, unlock_params=unlock_params, release_swa=release_swa,
                matched_len=matched_len)
