"""The accounting-only backend (model = 'none'): no forward pass.

Token ids are a pure function of (seed, rid, position), so an output does not
depend on batching, chunking or retraction; accepted lengths come from
``Acceptance``. It writes no KV, so its batches carry no slots and it keeps no device
mirror: the accounting is the engine's reservation, commit and eviction alone.
"""

from __future__ import annotations

import numpy as np

from mini_engine.config.engine_config import EngineConfig
from mini_engine.request import Request
from mini_engine.spec.acceptance import Acceptance, mix64, mix64_array
from mini_engine.forward.step_batch import Layout, Phase, StepBatch


class SimulatedBackend:
    reads = frozenset()  # no KV to write, so no slots to look up
    mirror = None

    def __init__(self, cfg: EngineConfig):
        self.cfg = cfg
        self.acceptance = Acceptance.from_config(cfg) if cfg.speculative else None

    def setup(self, layout: Layout) -> None:
        pass

    def forward(self, batch: StepBatch) -> list:
        reqs, phase = batch.reqs, batch.phase
        if phase is Phase.DECODE:
            return self.decode(reqs)
        if phase is Phase.VERIFY:
            return self.spec_step(reqs)
        if phase is Phase.PREFILL:
            return self.prefill(reqs, batch.starts.tolist(), batch.ends.tolist())
        return self.transfer(reqs)

    # -- the token rule of each phase (forward's cases) ------------------------------

    def token(self, rid: int, position: int) -> int:
        return mix64(self.cfg.seed, 0x70C, rid, position) % self.cfg.vocab_size

    def tokens(self, rids: list[int], positions: list[int]) -> list[int]:
        """token() of many (rid, position) pairs in one vectorised hash."""
        h = mix64_array((self.cfg.seed, 0x70C), np.asarray(rids), np.asarray(positions))
        return (h % np.uint64(self.cfg.vocab_size)).astype(np.int64).tolist()

    def prefill(self, reqs: list[Request], starts: list[int], ends: list[int]) -> list[int | None]:
        return [self.token(r.rid, e) if e == r.prefill_target else None for r, e in zip(reqs, ends)]

    def decode(self, reqs: list[Request]) -> list[int]:
        return self.tokens([r.rid for r in reqs], [r.seq_len for r in reqs])

    def spec_step(self, reqs: list[Request]) -> list[list[int]]:
        lens = [self.acceptance.draw(r.rid, r.seq_len) for r in reqs]
        rids = np.repeat([r.rid for r in reqs], lens)
        starts = np.repeat([r.seq_len for r in reqs], lens)
        offsets = np.arange(len(rids)) - np.repeat(np.cumsum(lens) - lens, lens)
        flat = self.tokens(rids, starts + offsets)
        out, i = [], 0
        for n in lens:
            out.append(flat[i : i + n])
            i += n
        return out

    def transfer(self, reqs: list[Request]) -> list[int]:
        return [self.token(r.rid, r.fill_len) for r in reqs]

    def release(self, req: Request) -> None:
        pass
