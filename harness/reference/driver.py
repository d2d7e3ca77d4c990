"""The reference loop's edges: arrivals, the stand-in forward, and what is read after each iteration.

One driver per run. The loop calls it from the four methods scheduler.py writes:

* ``arrive`` (``ingest_requests``): the requests whose arrival step has come join
  SGLang's waiting queue as SGLang ``Req``s (prompt ids, ``max_new_tokens`` = the
  number of outputs the mini engine produced, ``ignore_eos``); an idle engine jumps to
  the next arrival, as the mini engine's does (Engine.tick);
* ``forward`` (``run_batch``): one output id per request whose prefill ends in the
  batch or that decodes, the next of its recorded outputs (a middle chunk's is never
  read: SGLang's result processing skips it). Under DFLASH and EAGLE a verify accepts the length
  kvbench's acceptance draws for that request and position (mini_engine/spec/acceptance.py,
  a pure function of seed, rid and position), its accepted ids padded to the block as
  the verify's output is (EAGLE likewise, to its num_draft_tokens). Every spec forward
  leaves the batch a fresh draft input (spec.py);
* ``landed`` (``process_batch_result``): a result was processed; a request it finished
  that has a next turn (a session, harness/core/turns.py) submits that turn, its prompt
  the predecessor's prompt + outputs + new tokens, to arrive the next step (the mini
  engine's SessionEngine rule);
* ``iteration_done`` (the loop's ``last_batch`` update, its last statement): one step
  when the iteration ran a batch or processed a result, and its sample (sampler.py).
"""

from __future__ import annotations

from array import array

from harness.reference.req_fields import extend_len
from harness.reference.sampler import Sampler
from harness.reference.spec import draft_input
from mini_engine.request import Request


class StalledLoop(RuntimeError):
    """The loop ran iterations without a batch or a result while requests were left."""


class Driver:
    def __init__(self, sg, requests, outputs: dict, vocab_size: int, next_turns: dict | None = None,
                 acceptance=None, spec=None, topk: int = 1):
        self.sg, self.torch = sg, sg.torch
        self.acceptance, self.spec, self.topk = acceptance, spec, topk  # spec.Spec (None: plain decoding)
        self.pending = sorted(requests, key=lambda r: (r.arrival_step, r.rid))
        self.next_turns = dict(next_turns or {})  # predecessor rid -> its NextTurn
        self.outputs = outputs  # rid -> the mini engine's output ids
        self.vocab_size = vocab_size
        self.reqs: list = []  # SGLang's Req of every arrived request
        self.cursor: dict[int, int] = {}  # id(Req) -> index of its next output
        self.step = 0
        self.ran = False  # this iteration launched a batch or processed a result
        self.idle = 0
        self.sampler = Sampler()
        self.fake_host = None  # a PD decode node's: SGLang's fake bootstrap host (pd_decode.py)

    # -- arrivals ------------------------------------------------------------------
    def arrive(self, s) -> None:
        if not self.pending:
            return
        if not self._busy(s) and self.pending[0].arrival_step > self.step:
            self.step = self.pending[0].arrival_step  # idle time jumps to the next arrival
        while self.pending and self.pending[0].arrival_step <= self.step:
            r = self.pending.pop(0)
            req = self._req(r)
            self.reqs.append(req)
            s._add_request_to_queue(req)

    def _req(self, r):
        sg = self.sg
        params = sg.sampling.SamplingParams(max_new_tokens=len(self.outputs[r.rid]), ignore_eos=True)
        params.normalize(None)
        req = sg.batch.Req(str(r.rid), "", array("q", r.prompt), params, vocab_size=self.vocab_size)
        req.kvbench_rid = r.rid
        if r.fill_len:  # a PD arrival: its KV comes from a prefill node (pd_decode.py)
            req.bootstrap_host, req.bootstrap_room = self.fake_host, r.rid
        return req

    def _busy(self, s) -> bool:
        queued = getattr(s, "result_queue", None)
        return bool(s.waiting_queue or s.chunked_req is not None or queued
                    or any(not r.finished() for r in self.reqs))

    # -- the forward -----------------------------------------------------------------
    def forward(self, s, batch):
        extend = batch.forward_mode.is_extend()
        self.ran = True
        self.sampler.launched(batch, extend)
        torch, result = self.torch, self.sg.utils.GenerationBatchResult
        if not extend and self.spec is not None:
            result = self._verify(batch)
            self._relay(s, batch)
            return result
        ids = []
        for req in batch.reqs:
            if extend and req is batch.chunked_req:
                ids.append(0)  # a middle chunk: SGLang's prefill result skips its token
                continue
            if extend:
                self.cursor[id(req)] = len(req.output_ids)
            ids.extend(self._next(req, 1))
        if self.spec is not None:
            self._relay(s, batch)
        return result(next_token_ids=torch.tensor(ids, dtype=torch.int64),
                      extend_input_len_per_req=[extend_len(r) for r in batch.reqs] if extend else None)

    def _next(self, req, n: int) -> list[int]:
        """The request's next n recorded outputs (0 past the end: tokens SGLang never keeps)."""
        i = self.cursor.get(id(req), len(req.output_ids))
        outs = self.outputs[req.kvbench_rid]
        self.cursor[id(req)] = i + n
        return [outs[k] if k < len(outs) else 0 for k in range(i, i + n)]

    def _verify(self, batch):
        torch, block = self.torch, self.spec.stride
        ids, lens = [], []
        for req in batch.reqs:
            position = len(req.origin_input_ids) + self.cursor.get(id(req), len(req.output_ids))
            n = self.acceptance.draw(req.kvbench_rid, position)
            ids += self._next(req, n) + [0] * (block - n)
            lens.append(n)
        return self.sg.utils.GenerationBatchResult(
            next_token_ids=torch.tensor(ids, dtype=torch.int64), accept_lens=torch.tensor(lens, dtype=torch.int64),
            speculative_num_draft_tokens=block)

    def _relay(self, s, batch) -> None:
        batch.spec_info = draft_input(self.sg, self.spec, len(batch.reqs), self.topk)
        if s.enable_overlap:
            batch.spec_info.future_indices = batch.req_pool_indices

    def landed(self, s, batch) -> None:
        self.ran = True
        for req in batch.reqs:
            nxt = self.next_turns.pop(req.kvbench_rid, None) if req.finished() else None
            if nxt is not None:
                # What the client received: a verify's overshoot past max_new_tokens stays in
                # output_ids but is cut at finished_len (Req.output_ids_through_stop).
                prompt = [*req.origin_input_ids, *req.output_ids_through_stop, *nxt.new_tokens]
                self.pending.append(Request(rid=nxt.rid, prompt=prompt, max_new_tokens=nxt.max_new_tokens,
                                            arrival_step=self.step + 1))
                self.pending.sort(key=lambda r: (r.arrival_step, r.rid))

    def handed_off(self, req) -> None:
        """A PD arrival's KV landed (pop_transferred): its first output is the token the
        prefill node sampled, the first of its recorded outputs."""
        req.output_ids[-1] = self.outputs[req.kvbench_rid][0]
        self.cursor[id(req)] = 1
        self.ran = True

    def retracted(self, req) -> None:
        self.sampler.retractions += 1

    # -- the iteration's end ---------------------------------------------------------
    def iteration_done(self, s, batch) -> None:
        if self.ran:
            self.sampler.sample(s, self.reqs)
            self.step += 1
            self.idle = 0
        elif self._busy(s):
            self.idle += 1
            if self.idle > 2 * s.max_running_requests + 8:  # the mini engine's safety net
                raise StalledLoop(f"SGLang's loop made no progress for {self.idle} iterations at step {self.step}")
        self.ran = False

    def done(self, s) -> bool:
        return not self.pending and not self._busy(s)
