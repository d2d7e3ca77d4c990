"""Read an allocation trace (writer.py's JSON lines): its header, its records, and the checks
that refuse a file no engine run could have written.

The record format is declared once here (RECORDS, HEADER); each field is checked as it is
read, so a file that cannot be read as a trace is a TraceError (one line, exit 2 from the
CLI), not a divergence. replay (memory/replay/run.py) and conform (harness/conform/check.py,
which replays the same records on SGLang's own allocator) both read through here.
"""

from __future__ import annotations

import json
import os
from typing import Mapping

from mini_engine.errors import TraceError
from mini_engine.files import read_document
from mini_engine.memory.rules import RELEASES
from mini_engine.memory.trace.tree_calls import SWA_TREE_OPS, TREE_OPS
from mini_engine.memory.trace.writer import FORMAT, VERSION

# The record format, declared once: each op's fields and what each must be (KINDS).
# Every field listed is required; OPTIONAL ones are checked where a record has them.
# Plain checks, not a validation library: the engine stays numpy-only (the harness's
# config files use pydantic models, harness/schemas).
TREE_AFTER = {"evictable": "count", "protected": "count"}
SWA_AFTER = {"full_evictable": "count", "swa_evictable": "count"}
RECORDS = {
    "alloc_extend": {"prefix_lens": "counts", "seq_lens": "counts", "last_locs": "ints", "out": "any", "available": "int"},
    "free": {"indices": "ints", "available": "int"},
    "free_pages": {"page_ids": "ints", "available": "int"},
    "prepare": {"reserve": "count", "reqs": "reqs"},  # and "aligned" (newer traces) or "policy"
    "swa_prealloc": {"fill_len": "count", "window": "count", "tail": "count", "evicted": "int"},
    # The prefix tree's calls (version 2, memory/trace/tree_calls.py); each call also carries the
    # tree's evictable and protected sizes after it.
    "tree": {"bigram": "bool"},
    "tokens": {"rid": "rid", "at": "count", "ids": "ints"},
    "match": {"rid": "rid", "len": "count", "matched": "count", "node": "count", **TREE_AFTER},
    "insert": {"rid": "rid", "len": "count", "cached": "count", "node": "count", **TREE_AFTER},  # + pages or slots
    "lock": {"node": "count", "delta": "int", **TREE_AFTER},
    "unlock": {"node": "count", "delta": "int", **TREE_AFTER},
    "evict": {"num_tokens": "count", "evicted": "count", "pages": "ints", **TREE_AFTER},
    # The SWA-aware tree's calls (tree/swa_prefix.py); each carries the FULL and SWA evictable
    # sizes after it. An swa_insert has its FULL slots (pages or slots) and their SWA
    # slots (swa_pages or swa_slots, page or slot 0: none).
    "swa_tree": {"window": "size"},  # and "bigram" (EAGLE's keys; absent in older traces: tokens)
    "swa_match": {"rid": "rid", "len": "count", "matched": "count", "node": "count", **SWA_AFTER},
    "swa_insert": {"rid": "rid", "len": "count", "swa_evicted_seqlen": "count", "prev_prefix_len": "count",
                   "cached": "count", "node": "count", **SWA_AFTER},
    "swa_lock": {"node": "count", "rid": "rid", "delta": "int", **SWA_AFTER},
    "swa_unlock": {"node": "count", "rid": "rid", "delta": "int", **SWA_AFTER},  # and "skip_swa"
    # The early release of a lock's SWA part (dec_swa_lock_only); the request's unlock
    # after it says skip_swa (its FULL part only).
    "swa_release_swa": {"node": "count", "rid": "rid", **SWA_AFTER},
    "swa_evict": {"num_tokens": "count", "swa_num_tokens": "count", "evicted": "count", "swa_evicted": "count",
                  **SWA_AFTER},
}
OPTIONAL = {"full_hit": "count", "prev_prefix_len": "count", "pool": "pool", "decode": "bool", "bigram": "bool", "skip_swa": "bool", "need_sort": "bool",
            "touch": "bool", "aligned": "bool", "pages": "ints", "slots": "ints", "swa_pages": "ints", "swa_slots": "ints", "from": "rid"}
# The header (line 1), after its format and version: required fields, then those that
# may be absent or null.
HEADER = {"page_size": "size", "num_pages": "size"}
HEADER_OPTIONAL = {"swa_num_pages": "size", "row_width": "size", "profile": "object", "config": "object"}
REQ_FIELDS = ("cur", "committed", "nxt")  # one request of a prepare record
# A pool a trace can name: slot ids are int32 in SGLang's req_to_token, so a pool has
# fewer than 2**31 slots; replay and conform build host arrays (and conform torch
# tensors) of that many entries, so a larger header is refused before any is built.
MAX_POOL_SLOTS = 2**31 - 1
# Versions read: 1 has no tree records, 2 adds them (a version 1 trace replays as before).
READABLE = (1, VERSION)


def _short(x: object, limit: int = 120) -> str:
    text = json.dumps(x, separators=(",", ":")) if not isinstance(x, str) else x
    return text if len(text) <= limit else text[:limit] + "..."


def _read_header(path: str, line: str) -> dict:
    try:
        head = json.loads(line)
    except json.JSONDecodeError as err:
        raise TraceError(f"{path}: line 1 is not JSON ({err.msg}); expected the kvbench-trace header") from None
    if not isinstance(head, dict) or head.get("format") != FORMAT:
        raise TraceError(f'{path}: line 1 is not a kvbench-trace header (needs "format": "{FORMAT}")')
    if head.get("version") not in READABLE:
        raise TraceError(f"{path}: trace version {head.get('version')!r} is not supported "
                         f"(expected {' or '.join(map(str, READABLE))})")
    fields = {**HEADER, **{k: kind for k, kind in HEADER_OPTIONAL.items() if head.get(k) is not None}}
    for key, kind in fields.items():
        test, what = KINDS[kind]
        if not test(head.get(key)):
            null = "null or " if key in HEADER_OPTIONAL and kind != "object" else ""
            raise TraceError(f"{path}: header {key} must be {null}{what.removeprefix('must be ')} "
                             f"(got {_short(head.get(key), 60)})")
    for key in ("num_pages", "swa_num_pages"):
        pages = head.get(key)
        if pages is not None and (pages + 1) * head["page_size"] > MAX_POOL_SLOTS:
            raise TraceError(f"{path}: header {key} x page_size must be under {MAX_POOL_SLOTS + 1} slots "
                             f"(int32 slot ids, as in SGLang) (got {pages} x {head['page_size']})")
    return head


def _parse(path: str, lineno: int, line: str) -> dict:
    try:
        rec = json.loads(line)
    except json.JSONDecodeError as err:
        raise TraceError(f"{path}: line {lineno} is not JSON ({err.msg})") from None
    op = rec.get("op") if isinstance(rec, dict) else None
    if not isinstance(op, str) or op not in RECORDS:
        raise TraceError(f"{path}: line {lineno} has unknown op {op!r} (allowed: {', '.join(RECORDS)})")
    missing = [k for k in RECORDS[op] if k not in rec]
    if missing:
        raise TraceError(f"{path}: line {lineno} ({op}) lacks {', '.join(missing)}")
    fields = {**RECORDS[op], **{k: kind for k, kind in OPTIONAL.items() if k in rec}}
    for key, kind in fields.items():
        test, what = KINDS[kind]
        if not test(rec[key]):
            raise TraceError(f"{path}: line {lineno} ({op}) {key} {what} (got {_short(rec[key], 60)})")
    if op == "alloc_extend":
        # Malformed, not a divergence: a record no allocator call could have made (replay
        # and conform then refuse it alike, exit 2).
        lens = {len(rec[k]) for k in ("prefix_lens", "seq_lens", "last_locs")}
        if len(lens) > 1:
            raise TraceError(f"{path}: line {lineno} (alloc_extend) prefix_lens, seq_lens and last_locs must have "
                             f"one entry per request (got lengths {len(rec['prefix_lens'])}, {len(rec['seq_lens'])}, "
                             f"{len(rec['last_locs'])})")
        if any(q < p for p, q in zip(rec["prefix_lens"], rec["seq_lens"])):
            raise TraceError(f"{path}: line {lineno} (alloc_extend) each seq_lens entry must be >= its prefix_lens "
                             f"entry")
    if op in ("insert", "swa_insert") and ("pages" in rec) == ("slots" in rec):
        raise TraceError(f"{path}: line {lineno} ({op}) needs its slots as pages or slots (one of the two)")
    if op == "swa_insert" and ("swa_pages" in rec) == ("swa_slots" in rec):
        raise TraceError(f"{path}: line {lineno} (swa_insert) needs its SWA slots as swa_pages or swa_slots "
                         f"(one of the two)")
    if op == "prepare" and "aligned" not in rec and rec.get("policy") not in ("aligned", "unaligned"):
        raise TraceError(f'{path}: line {lineno} (prepare) needs "aligned": true|false '
                         f'(or "policy": "aligned"|"unaligned")')
    return rec


def prepare_aligned(rec: dict) -> bool:
    """Whether a prepare record page-ceils its reservation ("aligned", else the older "policy")."""
    return rec["aligned"] if "aligned" in rec else rec["policy"] == "aligned"


# A default `kvbench run` (256 requests of up to 1024 + 1024 tokens) writes about 5,600
# records; replay and conform take 0.15-1.5 ms a record, so this bound is minutes at
# most. A trace of 10^6 records ran on unbounded, with nothing said.
MAX_RECORDS = 200_000


def read_trace(path: str | os.PathLike) -> tuple[dict, list[tuple[int, dict]]]:
    """The header and every record (line number, parsed record) of a trace; TraceError if unreadable."""
    path = os.fspath(path)
    lines = read_document(path, "trace file", TraceError).splitlines()
    if not lines or not lines[0].strip():
        raise TraceError(f"trace file {path} is empty (expected a kvbench-trace header line)")
    if len(lines) - 1 > MAX_RECORDS and sum(1 for line in lines[1:] if line.strip()) > MAX_RECORDS:
        raise TraceError(f"trace file {path} holds more than {MAX_RECORDS:,} records, the most replay and conform "
                         f"read (a default kvbench run writes about 5,600); split the run")
    head = _read_header(path, lines[0])
    records = [(n, _parse(path, n, line)) for n, line in enumerate(lines[1:], start=2) if line.strip()]
    pools = {"full"} | ({"swa"} if head.get("swa_num_pages") else set())
    for n, rec in records:
        pool = rec.get("pool", "full")
        if rec["op"] not in ("prepare", "swa_prealloc", *TREE_OPS, *SWA_TREE_OPS) and pool not in pools:
            raise TraceError(f"{path}: line {n} uses pool {pool!r}, which the header does not define")
    return head, records


def pool_need_sort(path: str, records: list[tuple[int, dict]]) -> dict[str, bool]:
    """Per pool: whether its frees are staged and merged sorted (SGLang's need_sort, PD).

    The allocator marks each free of such a pool "need_sort": true; a pool whose frees
    disagree cannot be one allocator.
    """
    seen: dict[str, tuple[bool, int]] = {}
    for n, rec in records:
        if rec["op"] not in ("free", "free_pages"):
            continue
        pool, flag = rec.get("pool", "full"), rec.get("need_sort", False)
        if seen.setdefault(pool, (flag, n))[0] != flag:
            raise TraceError(f"{path}: line {n} frees pool {pool!r} with need_sort {str(flag).lower()}, "
                             f"line {seen[pool][1]} with {str(not flag).lower()}; one pool has one order")
    return {pool: flag for pool, (flag, _) in seen.items()}


def header_pd_radix(path: str, head: dict) -> bool:
    """Whether the trace's decode side had the radix cache and its release moves the PD SWA
    tail for it: the header profile's pd_radix, else its config's, else false; and the
    profile's pd_radix_tail (absent: true, 0.5.23's rule; 0.5.18 has no such variant)."""
    profile, config = head.get("profile") or {}, head.get("config") or {}  # objects, as read_trace checked
    pd_radix = profile.get("pd_radix", config.get("pd_radix", False))
    tail = profile.get("pd_radix_tail", True)
    for name, value in (("pd_radix", pd_radix), ("pd_radix_tail", tail)):
        if not isinstance(value, bool):
            raise TraceError(f"{path}: header {name} must be true or false (got {value!r})")
    return pd_radix and tail


def _is_int(x: object) -> bool:
    # int64 range: the allocator works in numpy int64, a larger number cannot be replayed.
    return isinstance(x, int) and not isinstance(x, bool) and -2**63 <= x < 2**63


def _is_count(x: object) -> bool:
    return _is_int(x) and x >= 0


def _int_list(x: object) -> bool:
    return isinstance(x, list) and all(_is_int(v) for v in x)


def _reqs(x: object) -> bool:
    return isinstance(x, list) and all(isinstance(r, dict) and all(_is_count(r.get(k)) for k in REQ_FIELDS) for r in x)


KINDS = {
    "int": (_is_int, "must be an integer"),
    "count": (_is_count, "must be an integer >= 0"),
    "size": (lambda x: _is_int(x) and x >= 1, "must be an integer >= 1"),
    "object": (lambda x: isinstance(x, dict), "must be an object"),
    "ints": (_int_list, "must be a list of integers"),
    "counts": (lambda x: _int_list(x) and all(v >= 0 for v in x), "must be a list of integers >= 0"),
    "bool": (lambda x: isinstance(x, bool), "must be true or false"),
    "pool": (lambda x: x in ("full", "swa"), 'must be "full" or "swa"'),
    "rid": (lambda x: _is_int(x) or isinstance(x, str), "must be an integer or a string"),
    "reqs": (_reqs, "is malformed (a list of requests, each with integers >= 0 cur, committed and nxt)"),
    "any": (lambda x: True, ""),
}


def check_algos(path: str, config: dict, records: list, algorithms: Mapping[str, str]) -> None:
    """An algorithm kvbench does not know (spec "medusa") would leave its reserve
    unchecked and the trace called conforming (conform) or clean (replay): refused by
    name instead. ``config``: the header's config table; ``algorithms``: each known
    algorithm's name -> its writer (``mini_engine.algos.writers()``)."""
    spec = config.get("spec")
    if spec is not None and spec not in algorithms:
        raise TraceError(f"{path}: header config.spec must be one of {', '.join(sorted(algorithms))} "
                         f"(got {str(spec)[:40]!r})")
    writers = {"none"} | set(algorithms.values())
    for lineno, rec in records:
        if rec["op"] == "prepare" and rec.get("algo") is not None and rec["algo"] not in writers:
            raise TraceError(f"{path}: line {lineno} (prepare) algo must be one of {', '.join(sorted(writers))} "
                             f"(got {str(rec['algo'])[:40]!r})")


def check_profile(path: str, head: dict, records: list[tuple[int, dict]],
                  releases: Mapping[str, str] | None = None) -> None:
    """The header's profile agrees with itself and with the records (R9): its release is
    one kvbench models, the one its named profile is (``releases``: profile name ->
    release, ``mini_engine.config.profiles.SGLANG_VERSIONS``), and a trace without a prefix tree
    (prefix_cache chunk) holds no tree call. Each was read past: a 0.5.23 trace relabelled
    0.5.18, or "chunk" over tree calls, replayed clean and conformed."""
    profile = head.get("profile") or {}
    release, name = profile.get("release"), profile.get("name")
    if release is not None and release not in RELEASES:
        raise TraceError(f"{path}: header profile release must be one of {', '.join(RELEASES)} "
                         f"(got {_short(release, 40)})")
    if release is not None and releases is not None and name in releases and releases[name] != release:
        raise TraceError(f"{path}: header profile {name} is SGLang {releases[name]}, but its release says "
                         f"{release}; the header was edited or is damaged")
    cache = profile.get("prefix_cache", (head.get("config") or {}).get("prefix_cache"))
    if cache == "chunk":
        tree = next(((n, rec["op"]) for n, rec in records if rec["op"] in TREE_OPS or rec["op"] in SWA_TREE_OPS), None)
        if tree is not None:
            raise TraceError(f"{path}: header prefix_cache is chunk (no prefix tree), but line {tree[0]} is a tree "
                             f"call ({tree[1]})")
