"""Sessions: a request's next turn arrives when it finishes, its prompt extended by the output.

The engine knows arrivals only as fixed steps (Request.arrival_step); a next turn's
prompt is its predecessor's prompt + outputs + new tokens, known only at that
predecessor's finish. SessionEngine adds that dependency around the engine without
changing it, through the engine's public ``on_finish`` hook: when a request finishes
with all its outputs, its NextTurn becomes a Request that arrives the next step, so the
predecessor's release (and whatever a prefix cache keeps of it) comes first.

Every turn is validated before the first step (lengths and pool, as the engine
validates any request): the lengths of later turns are known in advance, since a
request produces exactly max_new_tokens outputs.
"""

from __future__ import annotations

from dataclasses import dataclass

from mini_engine.config.engine_config import EngineConfig
from mini_engine.engine import Engine
from mini_engine.request import Request


@dataclass(frozen=True)
class NextTurn:
    rid: int
    new_tokens: list[int]  # after the predecessor's prompt and outputs
    max_new_tokens: int


class SessionEngine(Engine):
    def __init__(self, cfg: EngineConfig, next_turns: dict[int, NextTurn], **kwargs):
        self.next_turns = dict(next_turns)  # predecessor rid -> its next turn, popped when submitted
        super().__init__(cfg, on_finish=self._submit_next_turn, **kwargs)

    def validate(self, reqs: list[Request]) -> None:
        """The requests and, with stand-ins of their lengths, every turn that will follow them."""
        super().validate([*reqs, *self._stand_ins(reqs)])

    def _stand_ins(self, reqs: list[Request]) -> list[Request]:
        out = []
        for r in reqs:
            length, out_len, nxt = len(r.prompt), r.max_new_tokens, self.next_turns.get(r.rid)
            while nxt is not None:
                length += out_len + len(nxt.new_tokens)
                out_len = nxt.max_new_tokens
                out.append(Request(rid=nxt.rid, prompt=[0] * length, max_new_tokens=out_len))
                nxt = self.next_turns.get(nxt.rid)
        return out

    def _submit_next_turn(self, r: Request) -> None:
        """The engine's on_finish: ``r`` finished with all its outputs (a retracted request
        comes back, one released unfinished by a stopped run's drain has no next turn)."""
        nxt = self.next_turns.pop(r.rid, None)
        if nxt is not None:
            self.submit([Request(rid=nxt.rid, prompt=[*r.prompt, *r.outputs, *nxt.new_tokens],
                                 max_new_tokens=nxt.max_new_tokens, arrival_step=self.step_no + 1)])


def engine_for(cfg: EngineConfig, next_turns: dict[int, NextTurn], **kwargs) -> Engine:
    """The plain engine, or the session engine when some request has a next turn."""
    return SessionEngine(cfg, next_turns, **kwargs) if next_turns else Engine(cfg, **kwargs)
