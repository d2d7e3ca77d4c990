"""Multi-turn sessions: with turns > 1 each of the num_requests requests opens a session.

Turn t+1's prompt is turn t's prompt + turn t's output + new tokens, so it exists only
once turn t has finished: a real model's output is known only then. (The
accounting-only backend's outputs are a pure function of (seed, rid, position) and
could be precomputed, but a turn that arrived early would also run beside its
predecessor, where no prefix cache could reuse what that one still holds: the
dependency is needed either way, so both backends take the one path.) A later turn is
therefore no Request of the workload but a NextTurn (its rid, new tokens, output
length), which the session engine (mini_engine/scheduler/sessions.py) submits the step after
its predecessor finishes.

Lengths: a later turn's new tokens and its output are draws of the workload's shape,
like the first turn's own part, from streams of their own, so turn 0 of a session
workload is the single-turn workload token for token. Turn t of session i is request
t * num_requests + i. A PD request's later turns are ordinary prompts, prefilled here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from harness.core.errors import UsageError
from harness.core.lengths import draw_lengths

if TYPE_CHECKING:
    import numpy as np

    from mini_engine.scheduler.sessions import NextTurn

_STREAM = 0x7E2  # beside the workload's stream (harness/core/workloads.py) and the prefixes'


@dataclass
class LaterTurns:
    ins: np.ndarray  # (turns - 1, sessions): new prompt tokens of each later turn
    outs: np.ndarray  # (turns - 1, sessions): its output length
    seed: int

    def tokens(self, wl: Any) -> dict[int, NextTurn]:
        """predecessor rid -> its next turn, with the new tokens drawn."""
        import numpy as np  # numpy: optional, loaded only on this path

        from mini_engine.scheduler.sessions import NextTurn  # numpy: optional, loaded only on this path

        rng = np.random.default_rng([self.seed, _STREAM, 1])
        later, n = self.ins.shape
        out: dict[int, NextTurn] = {}
        for t in range(1, later + 1):
            for i in range(n):
                new = rng.integers(0, wl.prompt_vocab, int(self.ins[t - 1, i])).tolist()
                out[(t - 1) * n + i] = NextTurn(rid=t * n + i, new_tokens=new,
                                                max_new_tokens=int(self.outs[t - 1, i]))
        return out


def later_turns(wl: Any, seed: int, ins: np.ndarray, outs: np.ndarray,
                max_context: int | None) -> LaterTurns | None:
    """The later turns' lengths (None for single-turn sessions); a session whose last turn
    is longer than max_context is bad input, found before any of its tokens is drawn."""
    import numpy as np  # numpy: optional, loaded only on this path

    if wl.turns == 1:
        return None
    rng = np.random.default_rng([seed, _STREAM])
    n = len(ins)
    drawn = [draw_lengths(wl, rng, n) for _ in range(wl.turns - 1)]
    later_ins = np.stack([i for i, _ in drawn]).astype(np.int64)
    later_outs = np.stack([o for _, o in drawn]).astype(np.int64)
    if max_context is not None:
        # The last turn is the longest: every turn's new tokens and every output but its own.
        prompt = wl.shared_prefix + ins + outs + later_ins.sum(axis=0) + later_outs[:-1].sum(axis=0)
        bad = np.flatnonzero(prompt + later_outs[-1] > max_context)
        if len(bad):
            i = int(bad[0])
            p, o = int(prompt[i]), int(later_outs[-1, i])
            raise UsageError(f"max_context={max_context} is below the last of turns={wl.turns} of session {i} "
                             f"(request {(wl.turns - 1) * n + i}): prompt {p} (every turn's new tokens and the "
                             f"outputs before it) + output {o} = {p + o} tokens; raise max_context or lower turns")
    return LaterTurns(later_ins, later_outs, seed)


def nominal_length(cfg: dict[str, Any]) -> int:
    """A config's nominal longest request, as capacity sizes it: the prefix, then every
    turn's input_len and output_len (a session's last turn holds the whole conversation).
    A row recorded before these options reads as one turn without a prefix."""
    turns = int(cfg.get("turns") or 1)
    own = int(cfg.get("input_len") or 0) + int(cfg.get("output_len") or 0)
    return int(cfg.get("shared_prefix") or 0) + turns * own
