"""ModelBackend: the real transformer behind the engine's backend protocol.

The engine has reserved every slot before a call and hands over one StepBatch per
forward; this class reads only the batch (host slot rows and their SWA copies; plain
decode gathers its slots on the device from the backend's own mirror of req_to_token,
which the batch keeps up to date), writes K/V there through the forward pass and
returns tokens. It never holds the KV manager. The SWA layers write where the memory
layer's SWA map points.
Per-request state is the drafter's: target hidden states it still needs and how
far its own KV is final. The verify of chain drafts is verify_chains.py's.
"""

from __future__ import annotations

import numpy as np
import torch

from mini_engine.config.shapes import DEFAULT_DRAFT_LAYERS
from mini_engine.errors import ConfigError
from mini_engine.model.attention_torch import paged_attention
from mini_engine.model.attn_meta import build_meta, decode_meta
from mini_engine.model.config import torch_dtype
from mini_engine.model.draft import DraftModel
from mini_engine.model.draft_io import ChainDrafts, DraftJob, DraftTree, rows_upto
from mini_engine.model.extend_fused import SlotTable, can_fuse, paged_rows_meta
from mini_engine.model.feature_store import FeatureStore, settle
from mini_engine.model.loader import resolve_model
from mini_engine.model.mirror import DeviceMirror
from mini_engine.model.threads import ThreadChoice, bucket
from mini_engine.model.transformer import KVCache, Transformer
from mini_engine.model.verify_chains import verify_chains
from mini_engine.spec import verify
from mini_engine.forward.step_batch import Layout, Phase, StepBatch

SMALL_MODEL_PARAMS = 50_000_000
DEFAULT_DRAFT_NOISE = 0.1  # with every target layer shared: EAGLE chain tau ~2.8 of 4 on tiny


def attention_backend(name: str, head_dim: int):
    if name == "torch":
        return paged_attention
    if name == "triton":
        if not triton_fits(head_dim):
            raise ConfigError(f"attention=triton needs a power-of-two head_dim (the model has {head_dim}); "
                              "use attention=torch")
        from mini_engine.model.attention_triton import triton_paged_attention  # triton: only attention=triton

        return triton_paged_attention
    raise ConfigError(f"attention must be one of torch, triton (got {name!r})")


def triton_fits(head_dim: int) -> bool:
    """The Triton kernels index a head with tl.arange, which needs a power of two."""
    return head_dim & (head_dim - 1) == 0


class ModelBackend:
    # Plain decode (eager or through CUDA graphs) reads the device mirror; every other phase host rows.
    reads = frozenset({Phase.PREFILL, Phase.VERIFY, Phase.TRANSFER})

    def __init__(self, cfg, *, dtype: str | None = None, attention: str | None = None,
                 draft_layers: int | None = None, draft_noise: float | None = None,
                 cuda_graphs: bool | None = None):
        self.cfg = cfg
        self.device = torch.device(cfg.device)
        mcfg, weights = resolve_model(cfg.model, dtype=dtype, device=cfg.device)
        mcfg = mcfg.with_pattern(cfg.layer_pattern or "all-global", cfg.window or 0)
        self.mcfg = mcfg
        # A small model's forwards take microseconds per op: one thread or several is measured
        # per phase and batch size (threads.py). Bigger models keep torch's own threading.
        self.threads = None
        if self.device.type == "cpu" and mcfg.num_params() < SMALL_MODEL_PARAMS:
            self.threads = ThreadChoice()
        self.model = Transformer(mcfg, self.device, init=weights is None)
        if weights is not None:
            weights.load_into(self.model)
        on_gpu = self.device.type == "cuda"
        fits = triton_fits(mcfg.head_dim)
        self.attend = attention_backend(attention or ("triton" if on_gpu and fits else "torch"), mcfg.head_dim)
        # Decode graphs replay the Triton token kernel, whatever the attention backend.
        self.use_graphs = on_gpu and fits if cuda_graphs is None else cuda_graphs
        if self.use_graphs and not fits:
            raise ConfigError(f"CUDA graphs need a power-of-two head_dim (the model has {mcfg.head_dim})")
        self.temperature = float(cfg.temperature)
        self.gen = torch.Generator(device="cpu").manual_seed(cfg.seed)
        self.draft_model = None
        if cfg.speculative:
            layers = getattr(cfg, "draft_layers", None) if draft_layers is None else draft_layers
            noise = getattr(cfg, "draft_noise", None) if draft_noise is None else draft_noise
            self.draft_model = DraftModel(
                self.model,
                min(DEFAULT_DRAFT_LAYERS, mcfg.num_layers) if layers is None else layers,
                DEFAULT_DRAFT_NOISE if noise is None else noise,
                seed=mcfg.seed + 1,
            )
        self.layout: Layout | None = None
        self.mirror: DeviceMirror | None = None
        self.cache: KVCache | None = None
        self.drafter = None
        self.graphs = None
        self.feats: dict[object, FeatureStore] = {}

    # -- protocol ------------------------------------------------------------------
    def setup(self, layout: Layout) -> None:
        if self.mcfg.has_sliding and not layout.has_swa:
            raise ConfigError("the model has sliding layers but the memory layer has no SWA pool; set window")
        self.feats.clear()
        # The device copy of the tables belongs to what reads it: plain decode gathers its
        # slots there (decode_meta); prefill, verify, PD transfers and the drafters take
        # host rows from the batch.
        self.mirror = DeviceMirror(layout, self.device) if self.cfg.spec == "none" else None
        if self.layout == layout:
            return  # a later run of the same shape: keep the caches, drafter and captured graphs
        self.layout = layout
        self.cache = KVCache.allocate(self.mcfg, layout.full_slots, layout.swa_slots, self.device)
        cfg = self.cfg
        if self.draft_model is not None:
            self.draft_model.page_size = layout.page_size
            dcache = self.draft_model.new_cache(layout.full_slots)
            self.drafter = cfg.algo.make_drafter(cfg, self.draft_model, dcache, self.temperature, self.attend,
                                                 self.gen)
        self.graphs = None
        if self.use_graphs and cfg.algo.graphable:
            from mini_engine.model.cuda_graph import DecodeGraphs  # triton: only CUDA graphs load it

            self.graphs = DecodeGraphs(self, layout)

    def forward(self, batch: StepBatch) -> list:
        if self.threads is None:
            return self._forward(batch)
        return self.threads.run((batch.phase, bucket(len(batch.reqs))), lambda: self._forward(batch))

    def _forward(self, batch: StepBatch) -> list:
        phase = batch.phase
        if phase is Phase.DECODE:
            return self._decode(batch)
        if phase is Phase.VERIFY:
            return self._verify(batch)
        if phase is Phase.PREFILL:
            return self._prefill(batch)
        return self._transfer(batch)

    def release(self, req) -> None:
        self.feats.pop(req.rid, None)

    def check_tokens(self, r, toks: list[int]) -> list[int]:
        """Token ids of request r, refused with a one-line error when outside the vocabulary."""
        vocab = self.mcfg.vocab_size
        bad = next((t for t in toks if not 0 <= t < vocab), None)
        if bad is not None:
            raise ConfigError(
                f"token {bad} of request {r.rid} is outside the model's vocabulary (vocab_size={vocab}); "
                f"draw prompts from [0, {vocab})")
        return list(toks)

    # -- the phases ------------------------------------------------------------------
    @torch.inference_mode()  # no autograd bookkeeping on any of a step's ops
    def _prefill(self, b: StepBatch) -> list[int | None]:
        reqs, starts, ends = b.reqs, b.starts.tolist(), b.ends.tolist()
        ids, lens = [], []
        for k, (r, s, e) in enumerate(zip(reqs, starts, ends)):
            _writes_from(r, s, b.committed[k])
            ids += self.check_tokens(r, r.tokens(s, e))
            lens.append(e - s)
        h = self.target_forward(ids, b.slots, b.swa_slots, lens, None, None, fuse=True)
        done, last = [], []
        off = 0
        for k, (r, s, e) in enumerate(zip(reqs, starts, ends)):
            hr = h[off : off + e - s]
            off += e - s
            if self.drafter is not None:
                self._store(r).put(s, hr)
            if e == r.prefill_target:
                done.append(k)
                last.append(hr[-1:])
        out: list[int | None] = [None] * len(reqs)
        if last:  # one LM head pass for the batch: on a GPU each pass converts the whole head
            for k, tok in zip(done, self._next(torch.cat(last))):
                out[k] = tok
        if self.drafter is not None:
            self._draft_context(reqs, ends, b.slots)
        return out

    def _draft_context(self, reqs, ends, slots) -> None:
        """The drafter's own KV follows the target's prefill chunk by chunk (EAGLE's draft
        extend), so a spec step only drafts from the few positions verified last step.
        slots: each request's slots of positions [0, end)."""
        jobs = []
        for r, e, row in zip(reqs, ends, slots):
            st = self._store(r)
            if e > st.draft_done:
                d, feats = st.draft_inputs(e)
                jobs.append(DraftJob(d, r.tokens(d, e), feats, row[:e]))
                st.draft_done = e
                st.trim()
        if jobs:
            self.drafter.extend(jobs)

    @torch.inference_mode()
    def _decode(self, b: StepBatch) -> list[int]:
        reqs, lens = b.reqs, b.ends
        n = len(reqs)
        # Host columns of the batch, one pass each; every check runs on the whole batch.
        for k in np.flatnonzero(b.committed != lens - 1)[:1]:
            _writes_from(reqs[k], int(lens[k]) - 1, b.committed[k])
        mirror = self.mirror
        if mirror is not None and b.mirror is not None:
            mirror.apply(b.mirror)  # the host writes since the last decode, once per step (a graph step too)
        if self.graphs is not None:
            got = self.graphs.decode(b, mirror)
            if got is not None:
                return got
        ids = np.fromiter((r.last_token() for r in reqs), dtype=np.int64, count=n)
        self.check_ids(reqs, ids)
        # The torch backend gathers whole pages; the Triton kernels read the flat layout.
        meta = decode_meta(mirror.table, b.rows, lens, self.layout.page_size, mirror.swa_map,
                           flat=self.attend is not paged_attention)
        h = self.model(torch.from_numpy(ids).to(self.device), meta.q_pos, meta, self.cache, self.attend)
        return self._next(h)

    @torch.inference_mode()
    def _verify(self, b: StepBatch) -> list[list[int]]:
        reqs = b.reqs
        roots = b.starts
        for k in np.flatnonzero(roots != b.committed)[:1].tolist():
            _writes_from(reqs[k], int(roots[k]), b.committed[k])
        jobs, stores = [], []
        for r, root, slots in zip(reqs, roots.tolist(), b.slots):
            st = self._store(r)
            stores.append(st)
            d = st.draft_done
            jobs.append(DraftJob(d, r.tokens(d, root + 1), st.get(d - 1, root), slots))
        # One slot table for every forward of the step (the drafter's and the verify), when
        # they go through the compiled decode layers (extend_fused.py).
        table = None
        if b.swa_slots is None and can_fuse(self.model.model.layers, torch_dtype(self.mcfg), self.device,
                                            self.attend is paged_attention):
            table = SlotTable(b.slots, self.layout.page_size, self.device)
        drafts = self.drafter.draft(jobs, table=table)
        if isinstance(drafts, ChainDrafts):
            results, counts, keep, h = verify_chains(self, b, jobs, drafts, table)
        else:
            results, paths, h = self._verify_trees(b, jobs, drafts)
            counts = np.fromiter(map(len, paths), dtype=np.int64, count=len(paths))
            lens = [len(t.tokens) for t in drafts]
            offs = np.cumsum(lens) - lens
            keep = np.concatenate([off + np.asarray(p, dtype=np.int64) for off, p in zip(offs.tolist(), paths)])
        # EAGLE's root KV is final after its draft forward; DFLASH's block overwrote it.
        done = self.cfg.algo.draft_root_done
        before_root = None
        if done == 0:
            starts = np.fromiter((len(j.feats) for j in jobs), dtype=np.int64, count=len(jobs))
            before_root = torch.cat([j.feats for j in jobs]).index_select(
                0, torch.from_numpy(np.cumsum(starts) - 1).to(self.device))
        settle(stores, roots, h, keep, counts, before_root, done)
        return results

    def _verify_trees(self, b: StepBatch, jobs: list[DraftJob], trees: list[DraftTree]):
        """Trees (EAGLE topk > 1): per request verdicts; the accepted branch made contiguous."""
        reqs = b.reqs
        ids, rows, swa_rows, lens, pos, masks = [], [], [], [], [], []
        for k, (r, j, t) in enumerate(zip(reqs, jobs, trees)):
            n = len(t.tokens)
            ids += self.check_tokens(r, t.tokens)
            rows.append(rows_upto(j, j.root + n))
            if b.swa_slots is not None:
                swa_rows.append(b.swa_slots[k][: j.root + n])
            lens.append(n)
            pos.append(j.root + np.asarray(t.depths, dtype=np.int64))
            chain = t.parents == verify.chain_parents(n)
            masks.append(None if chain else _ancestor_mask(t))
        h = self.target_forward(ids, rows, swa_rows if b.swa_slots is not None else None, lens, pos, masks, fuse=True)
        logits = self.model.logits(h)
        results, paths = [], []
        off = 0
        greedy = self.temperature <= 0
        argmax = logits.argmax(-1).tolist() if greedy else None
        for t, n in zip(trees, lens):
            if greedy:
                v = verify.greedy(t.tokens, t.parents, argmax[off : off + n])
            else:
                p = torch.softmax(logits[off : off + n].double() / self.temperature, -1).cpu()
                q = t.q.cpu() if t.q is not None else torch.zeros_like(p)
                v = verify.sample(t.tokens, t.parents, p, q, self.gen)
            off += n
            results.append(v.tokens)
            paths.append(v.path)
        self._move_branches(jobs, paths, b.swa_slots)
        return results, paths, h

    @torch.inference_mode()
    def _transfer(self, b: StepBatch) -> list[int]:
        """PD arrival: compute the prompt's KV as the prefill node would, then receive it."""
        out = []
        for k, r in enumerate(b.reqs):
            n = int(b.ends[k])
            ids = self.check_tokens(r, r.tokens(0, n))
            scratch = KVCache.allocate(self.mcfg, n + 1, n + 1, self.device)
            local = np.arange(1, n + 1, dtype=np.int64)
            meta = build_meta([local], [n], None, self.device, swa_rows=[local] if self.mcfg.has_sliding else None)
            h = self.model(torch.tensor(ids, device=self.device), meta.q_pos, meta, scratch, self.attend)
            slots = b.slots[k][:n]
            # The decode side's radix hit [0, start) is the tree's KV, not written again; its
            # SWA keeps only the tail above the cursor (the evict floor).
            start = int(b.starts[k])
            swa_start = max(int(b.swa_cursor[k]), start)
            full_dst = torch.from_numpy(slots[start:].copy()).to(self.device)
            swa_dst = None
            if b.swa_slots is not None:
                swa_dst = torch.from_numpy(np.ascontiguousarray(b.swa_slots[k][swa_start:n])).to(self.device)
            for i, sliding in enumerate(self.cache.sliding):
                src = slice(swa_start + 1, n + 1) if sliding else slice(start + 1, n + 1)
                dst = swa_dst if sliding else full_dst
                self.cache.k[i][dst] = scratch.k[i][src]
                self.cache.v[i][dst] = scratch.v[i][src]
            if self.drafter is not None:
                self._store(r).put(0, h)
                self._draft_context([r], [n], [slots])
            out.append(self._next(h[-1:])[0])
        return out

    # -- internals -----------------------------------------------------------------
    def target_forward(self, ids, rows, swa_rows, lens, pos, masks, fuse: bool = False) -> torch.Tensor:
        meta = None
        if fuse and swa_rows is None and can_fuse(self.model.model.layers, torch_dtype(self.mcfg), self.device,
                                         self.attend is paged_attention):
            # A prefill chunk or a verify as one compiled call, one decode row per query
            # (extend_fused.py). Faster than the Python layer's SDPA for every chunk measured,
            # long ones included: 64 x 32-token prompts 15-17 ms against 23-29, 2 x 4000 tokens
            # 553 ms against 655 (1,060 against 1,230 at one thread), same greedy outputs.
            meta = paged_rows_meta(rows, lens, pos, masks, self.layout.page_size, self.device)
        if meta is None:
            meta = build_meta(rows, lens, pos, self.device, swa_rows=swa_rows, tree_masks=masks)
        if not isinstance(ids, torch.Tensor):
            ids = torch.tensor(ids, device=self.device)
        return self.model(ids, meta.q_pos, meta, self.cache, self.attend)

    def _next(self, h: torch.Tensor) -> list[int]:
        if self.temperature <= 0:
            return self.model.greedy(h).tolist()
        logits = self.model.logits(h)
        p = torch.softmax(logits.double() / self.temperature, -1).cpu()
        return torch.multinomial(p, 1, generator=self.gen).squeeze(-1).tolist()

    def _move_branches(self, jobs: list[DraftJob], paths: list[list[int]],
                       swa_slots: list[np.ndarray] | None) -> None:
        """Make each accepted tree branch contiguous in the target KV: one KV move for the batch."""
        src, dst, swa_src, swa_dst = [], [], [], []
        for i, (j, path) in enumerate(zip(jobs, paths)):
            root = j.root
            for k, node in enumerate(path):
                if node != k:  # a tree branch: node's KV goes to position root + k
                    src.append(j.slots[root + node])
                    dst.append(j.slots[root + k])
                    if swa_slots is not None:
                        swa_src.append(swa_slots[i][root + node])
                        swa_dst.append(swa_slots[i][root + k])
        if not src:
            return
        src_a, dst_a = np.array(src, dtype=np.int64), np.array(dst, dtype=np.int64)
        if swa_slots is not None:
            swa_src = torch.tensor(swa_src, dtype=torch.int64).to(self.device)
            swa_dst = torch.tensor(swa_dst, dtype=torch.int64).to(self.device)
        else:
            swa_src = swa_dst = None
        self.cache.move(torch.from_numpy(src_a).to(self.device), torch.from_numpy(dst_a).to(self.device),
                        swa_src, swa_dst)

    def _store(self, r) -> FeatureStore:
        st = self.feats.get(r.rid)
        if st is None:
            st = self.feats[r.rid] = FeatureStore(self.mcfg.hidden_size, self.device, torch_dtype(self.mcfg))
        return st

    def check_ids(self, reqs, ids: np.ndarray) -> None:
        """check_tokens for one token per request, on the whole batch at once."""
        if len(ids) and (ids.min() < 0 or ids.max() >= self.mcfg.vocab_size):
            k = int(np.flatnonzero((ids < 0) | (ids >= self.mcfg.vocab_size))[0])
            self.check_tokens(reqs[k], [int(ids[k])])


def _writes_from(r, start: int, committed: int) -> None:
    """A forward writes KV from the first position that is not final: rewriting committed KV
    (or leaving a gap) would be an engine bug that K11 alone might not show."""
    if start != committed:
        raise RuntimeError(f"request {r.rid}: the forward would write from position {start}, "
                           f"but its KV is final up to {committed}")


def _ancestor_mask(t: DraftTree) -> np.ndarray:
    n = len(t.tokens)
    m = np.zeros((n, n), dtype=np.int8)
    for i in range(n):
        a = i
        while a >= 0:
            m[i, a] = 1
            a = t.parents[a]
    return m
