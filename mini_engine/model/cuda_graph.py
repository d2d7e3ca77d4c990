"""CUDA graphs for plain greedy decode on a GPU.

One graph per batch-size bucket, captured lazily on first use. Everything a decode
step reads lives in static device buffers (token ids, positions, output slots, the
flattened slot rows and their offsets), filled before each replay: ids and positions
from host numpy, the slots gathered on the device from the backend's mirror of
req_to_token (as eager decode reads them);
the Triton attention kernel reads every length from those buffers, so its grid
depends only on the bucket. Padding rows decode token 0 at position 0 into the
dummy slot 0 and are dropped.

Off a GPU (`capture=False`) the same static-buffer path runs eagerly, which is how
the CPU tests check the buffer filling and padding without a device.
"""

from __future__ import annotations

import numpy as np
import torch

from mini_engine.model.attention_triton import triton_paged_attention
from mini_engine.model.attn_meta import AttnMeta, decode_meta
from mini_engine.model.mirror import DeviceMirror
from mini_engine.forward.step_batch import Layout, StepBatch

def _token_attention(*args, **kwargs):
    return triton_paged_attention(*args, kernel="token", **kwargs)


BUCKETS = (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 192, 256)


class DecodeGraphs:
    def __init__(self, backend, layout: Layout, capture: bool | None = None):
        self.backend = backend
        self.capture = backend.device.type == "cuda" if capture is None else capture
        self.model = backend.model
        self.cache = backend.cache
        self.has_swa = layout.has_swa
        self.page_size = layout.page_size
        # Buffers for the bucket that holds max_reqs: a batch of 17 with max_reqs 20 replays
        # the 24 graph instead of falling back to eager decode.
        self.max_batch = next(x for x in BUCKETS if x >= min(layout.max_reqs, BUCKETS[-1]))
        self.width = layout.row_width
        dev = backend.device
        n, w = self.max_batch, self.width
        i64 = dict(dtype=torch.int64, device=dev)
        self.ids = torch.zeros(n, **i64)
        self.pos = torch.zeros(n, **i64)
        self.out_slots = torch.zeros(n, **i64)
        self.swa_out = torch.zeros(n, **i64)
        self.kv_indptr = torch.zeros(n + 1, **i64)
        self.kv_slots = torch.zeros(n * w, **i64)
        self.swa_kv_slots = torch.zeros(n * w, **i64)
        self.arange = torch.arange(n + 1, **i64)
        self.graphs: dict[int, tuple[torch.cuda.CUDAGraph, torch.Tensor]] = {}
        self.pool = None

    def _meta(self, b: int) -> AttnMeta:
        return AttnMeta(
            batch=b, max_q=1, max_kv=self.width, q_lens=np.ones(b, dtype=np.int64),
            kv_lens=np.ones(b, dtype=np.int64),  # host copy unused by the Triton kernel
            q_indptr=self.arange[: b + 1], kv_indptr=self.kv_indptr[: b + 1], q_pos=self.pos[:b],
            tok_seq=self.arange[:b], kv_slots=self.kv_slots, out_slots=self.out_slots[:b],
            swa_kv_slots=self.swa_kv_slots if self.has_swa else None,
            swa_out_slots=self.swa_out[:b] if self.has_swa else None,
        )

    def _run(self, b: int) -> torch.Tensor:
        # The per-token kernel: its grid is the bucket size and it needs no per-call index arrays.
        h = self.model(self.ids[:b], self.pos[:b], self._meta(b), self.cache, _token_attention)
        return self.model.logits(h).argmax(-1)

    def _capture(self, b: int) -> None:
        self._fill_padding(b)
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(2):  # warm up: Triton compiles, allocator settles
                self._run(b)
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self.pool):
            out = self._run(b)
        self.pool = graph.pool()
        self.graphs[b] = (graph, out)

    def _fill_padding(self, b: int) -> None:
        """Before capture, rows [0, b) decode nothing: token 0, position 0, one key in the dummy slot 0."""
        for buf in (self.ids, self.pos, self.out_slots, self.swa_out, self.kv_slots, self.swa_kv_slots):
            buf[:b] = 0
        self.kv_indptr[: b + 1] = self.arange[: b + 1]

    def decode(self, batch: StepBatch, mirror: DeviceMirror) -> list[int] | None:
        """Greedy decode through a graph; None when a graph does not apply (eager fallback).

        The slots come from the backend's device mirror of req_to_token (already brought up
        to date from the batch), gathered flat on the device as eager decode gathers them,
        then copied into the static buffers: no host slot row is read."""
        reqs = batch.reqs
        n = len(reqs)
        if self.backend.temperature > 0 or n > self.max_batch:
            return None
        b = next(x for x in BUCKETS if x >= n)
        if self.capture and b not in self.graphs:
            self._capture(b)
        ids = np.array([self.backend.check_tokens(r, [r.last_token()])[0] for r in reqs], dtype=np.int64)
        lens = batch.ends
        pad = b - n
        meta = decode_meta(mirror.table, batch.rows, lens, self.page_size, mirror.swa_map, flat=True)
        total = int(lens.sum())
        dev = self.ids.device
        put = lambda dst, a: dst[: len(a)].copy_(torch.from_numpy(np.ascontiguousarray(a, dtype=np.int64)).to(dev, non_blocking=True))  # noqa: E731
        put(self.ids, np.concatenate([ids, np.zeros(pad, dtype=np.int64)]))
        put(self.pos, np.concatenate([lens - 1, np.zeros(pad, dtype=np.int64)]))
        # Padding rows: one key each, in the dummy slot 0.
        self.kv_indptr[: n + 1].copy_(meta.kv_indptr)
        self.kv_indptr[n + 1 : b + 1].copy_(total + self.arange[1 : pad + 1])
        for dst, src, per_row in ((self.kv_slots, meta.kv_slots, total), (self.out_slots, meta.out_slots, n),
                                  (self.swa_kv_slots, meta.swa_kv_slots, total), (self.swa_out, meta.swa_out_slots, n)):
            if src is None:  # no SWA layers
                continue
            dst[:per_row].copy_(src)
            dst[per_row : per_row + pad] = 0
        if not self.capture:
            return self._run(b)[:n].tolist()
        graph, result = self.graphs[b]
        graph.replay()
        return result[:n].tolist()
