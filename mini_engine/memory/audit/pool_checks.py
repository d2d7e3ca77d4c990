"""Invariants K1-K10 of DESIGN.md section 2, as state checks over a KVManager's pools,
rows and requests.

They run after a step (KVManager.check, through check_all.py); the writers' event
checks report through the Auditor (record.py) as they happen. Audit reads (K7's
mapping, K10's read of the model backend's device mirror) are allowed here: they are
not on the scheduler's hot path. This module imports no torch: the mirror is handed
in as an object with `rows` and `swa_of` methods.
"""

from __future__ import annotations

from operator import attrgetter
from typing import TYPE_CHECKING, Protocol

import numpy as np

from mini_engine.memory import sizing
from mini_engine.memory.audit.live import Live
from mini_engine.memory.audit.record import Violation

if TYPE_CHECKING:
    from mini_engine.memory.batch import BatchArrays
    from mini_engine.memory.manager import KVManager

_RID = attrgetter("rid")


class Mirror(Protocol):
    """What K10 reads of a backend's device copy of the tables (an audit read, host numpy out)."""

    def rows(self, rows: np.ndarray, width: int) -> np.ndarray:
        """Columns [0, width) of the given req_to_token rows, as the forward reads them."""

    def swa_of(self, full_slots: np.ndarray) -> np.ndarray | None:
        """The SWA slots the device map gives these full slots (None: no SWA map)."""



def check_k1(m: KVManager, step: int, live: Live | None = None) -> list[Violation]:
    """K1: an extent a page-ceiling writer recorded is a page multiple with pages held == extent / ps
    (0 stranded slots); any extent holds exactly the pages it touches, ceil(extent / ps).

    Which writers page-ceil is the profile's align knob: under host-aligned every
    extent is held to 0 stranded slots; an exact writer's tail is stranded, not a breach.
    """
    live = live or Live(m)
    alloc = live.alloc
    held = m.ledger.held["full"][live.rows]
    touched = -(-alloc // m.ps)
    if m.prefix is not None:  # the tree's prefix [0, protected) is in the row, not in the request's ledger
        touched = touched - live.prot // m.ps
    bad = (live.aligned & (alloc % m.ps != 0)) | (held != touched)
    return [Violation("K1", live.states[i].rid, step, {
        "allocated": int(alloc[i]), "pages_held": int(held[i]), "page_size": m.ps,
        "writer": live.states[i].writer, "stranded": int(held[i] * m.ps - alloc[i])})
        for i in np.flatnonzero(bad).tolist()]


def check_k2(m: KVManager, step: int, live: Live | None = None) -> list[Violation]:
    """K2: no live extent went back since the last check (the writer refuses it too)."""
    live = live or Live(m)
    prev = m.seen.alloc[live.rows]
    bad = m.seen.same(live) & (live.alloc < prev)
    return [Violation("K2", live.states[i].rid, step, {"old": int(prev[i]), "new": int(live.alloc[i])})
            for i in np.flatnonzero(bad).tolist()]


def check_k3(m: KVManager, step: int, live: Live | None = None) -> list[Violation]:
    """K3: protected <= committed <= allocated <= row width; protected page aligned."""
    live = live or Live(m)
    w, ps = m.mem.row_width, m.ps
    prot = live.prot
    com, alloc = live.com, live.alloc
    ok = (prot >= 0) & (prot <= com) & (com <= alloc) & (alloc <= w) & (prot % ps == 0)
    return [Violation("K3", live.states[i].rid, step, {
        "protected": int(prot[i]), "committed": int(com[i]), "allocated": int(alloc[i]), "row_width": w})
        for i in np.flatnonzero(~ok).tolist()]


def check_k4(m: KVManager, step: int, live: Live | None = None) -> list[Violation]:
    """K4: the last reservation still covers committed-at-prepare + reserve."""
    live = live or Live(m)
    base, reserve = m.reserve_base[live.rows], m.reserve_of[live.rows]
    bad = (reserve != 0) & (live.alloc < base + reserve)
    return [Violation("K4", live.states[i].rid, step, {
        "allocated": int(live.alloc[i]), "committed_at_prepare": int(base[i]), "reserve": int(reserve[i])})
        for i in np.flatnonzero(bad).tolist()]


def _pools(m: KVManager):
    yield "full", m.full
    if m.swa is not None:
        yield "swa", m.swa.allocator


def check_k5(m: KVManager, step: int) -> list[Violation]:
    """K5 (state side): the free list holds each page once, never the dummy page 0."""
    out = []
    for name, a in _pools(m):
        # This runs every step over the whole free list: bounds first (min/max make no
        # temporary), then one bool mark per page (no sort, no int64 count array), read
        # in place (the list and the staged frees are not concatenated).
        parts = [p for p in a.free_parts() if len(p)]
        n = sum(map(len, parts))
        if not n:
            continue
        ok = min(int(p.min()) for p in parts) > 0 and max(int(p.max()) for p in parts) <= a.num_pages
        if ok:
            marked = np.zeros(a.num_pages + 1, dtype=bool)
            for p in parts:
                marked[p] = True
            # A page listed twice marks fewer pages than the list is long.
            ok = np.count_nonzero(marked) == n and not np.count_nonzero(marked > a._is_free)
        if not ok:
            out.append(Violation("K5", None, step, {"pool": name, "reason": "free list corrupt", "free": n}))
    return out


def check_k6(m: KVManager, step: int, live: Live | None = None) -> list[Violation]:
    """K6: cursors are >= 0, page multiples, and did not move back since the last check."""
    live = live or Live(m)
    seen, swa = m.seen, live.swa
    prev = np.where(seen.ids[live.rows] != 0, seen.swa[live.rows], 0)  # 0 where the row was not seen
    bad = (swa < 0) | (swa % m.ps != 0) | (seen.same(live) & (swa < prev))
    return [Violation("K6", live.states[i].rid, step, {
        "value": int(swa[i]), "previous": int(prev[i]), "page_size": m.ps})
        for i in np.flatnonzero(bad).tolist()]


def check_k7(m: KVManager, step: int, live: Live | None = None) -> list[Violation]:
    """K7: the SWA map is 0 below the cursor; above it, each page maps into one live SWA page."""
    if m.swa is None:
        return []
    live = live or Live(m)
    states = live.states
    # Every step reads every live position: one vector pass over all rows says which rows
    # can be in breach, and only those are read again row by row (_k7_row), which words the
    # report. A row the pass clears passes every test of _k7_row.
    out = []
    for i in np.flatnonzero(_k7_suspects(m, live)).tolist():
        v = _k7_row(m, step, states[i])
        if v is not None:
            out.append(v)
    return out


def _spans(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(which span, position) of every position of spans [starts, ends), spans in order."""
    lens = np.maximum(ends - starts, 0)
    which = np.repeat(np.arange(len(lens)), lens)
    first = np.cumsum(lens) - lens  # each span's first flat index
    return which, np.arange(len(which)) - first[which] + starts[which]


def _k7_suspects(m: KVManager, live: Live) -> np.ndarray:
    """Per live state: whether _k7_row may find a problem in its row (False: it finds none)."""
    n, ps, w, rows = len(live.states), m.ps, m.mem.row_width, live.rows  # a state's row is its key
    prot = np.minimum(live.prot, w)
    cur, ext = np.maximum(live.swa, prot), np.minimum(live.alloc, w)
    pages_held = np.where(ext > cur, -(-ext // ps) - cur // ps, 0)  # each row's SWA pages, by its extent
    bad = (m.ledger.held["swa"][rows] != pages_held) | (cur % ps != 0)  # an unaligned cursor: row by row
    host, swa_map, owner = m.req_to_token.host, m.swa.map_host, m.ledger.owner["swa"]
    # Every position from the tree's part to the extent in one pass (the per-call cost of
    # the numpy calls, not the positions, bounds this check): below the cursor no SWA copy,
    # above it one on a page the request holds.
    which, pos = _spans(prot, ext)
    owners = rows[which]
    mapped = swa_map[host[owners, pos]]
    cw = cur[which]
    below = pos < cw
    idx = np.arange(len(pos))
    # The flat index of its page's first position above the cursor (its own below it).
    head = np.where(below, idx, idx - (pos - np.maximum((pos // ps) * ps, cw)))
    pages = mapped // ps
    inside = (pages >= 0) & (pages < len(owner))
    pages = np.where(inside, pages, 0)  # a page outside the pool: its row is flagged below
    wrong = np.where(below, mapped != 0, (mapped == 0) | (mapped % ps != pos % ps) | (pages != pages[head])
                     | ~inside | (owner[pages] != owners + 1))
    bad |= np.bincount(which[wrong], minlength=n) > 0
    # Two pages of positions on one SWA page: one mark per page (no sort) marks fewer
    # pages than there are heads; then every row is read row by row.
    heads = pages[(head == idx) & ~below]
    marked = np.zeros(len(owner), dtype=bool)
    marked[heads] = True
    if np.count_nonzero(marked) != len(heads):
        bad[:] = True
    return bad


def _k7_row(m: KVManager, step: int, s) -> Violation | None:
    ps, host, owner = m.ps, m.req_to_token.host, m.ledger.owner["swa"]
    row = host[s.row]
    # The row's own positions: an extent written past the row (memory.overflow) maps
    # the rest in the next row's positions, which that row's own check reads.
    # [0, protected): the SWA-aware tree's slots (memory/tree/swa_prefix.py), checked by K14.
    prot = min(s.protected, m.mem.row_width)
    cur, ext = max(s.swa_evicted, prot), min(s.allocated, m.mem.row_width)
    below = m.swa.map_host[row[prot:min(cur, ext)]]
    above = m.swa.map_host[row[cur:ext]] if ext > cur else np.empty(0, dtype=np.int64)
    pos = np.arange(cur, max(cur, ext))
    live = -(-ext // ps) - cur // ps if ext > cur else 0  # pages of positions above the cursor
    pages = above // ps
    # Positions of one page share its first position's SWA page (cursor is page aligned).
    first = pages[((pos // ps) * ps - cur).clip(0)] if len(pages) else pages
    problems = []
    if below.any():
        problems.append("SWA copy below the cursor")
    if (above == 0).any():
        problems.append("no SWA copy above the cursor")
    elif len(above) and ((above % ps != pos % ps).any() or (pages != first).any()):
        problems.append("positions of one page map to different SWA pages")
    elif len(above) and (owner[pages] != s.row + 1).any():
        problems.append("SWA page not held by the request")
    elif len(np.unique(pages[::ps])) != live:
        problems.append("two pages of positions share one SWA page")
    # The request holds no SWA page beyond those (one kept below the cursor is wasted).
    if m.ledger.held["swa"][s.row] != live:
        problems.append(f"SWA pages held {int(m.ledger.held['swa'][s.row])} != {live} live pages")
    if not problems:
        return None
    return Violation("K7", s.rid, step, {"cursor": cur, "allocated": ext, "reason": "; ".join(problems)})


def check_k8(m: KVManager, step: int) -> list[Violation]:
    """K8: free + held by requests + held by the prefix tree == total per pool, no page in
    two of them; new leaks reported once."""
    out = []
    for name, a in _pools(m):
        held = m.ledger.total[name]
        free = a.num_free_pages
        tree = getattr(m.prefix, "in_tree" if name == "full" else "in_tree_swa", None)
        in_tree = (m.tree_pages if name == "full" else m.tree_swa_pages) if tree is not None else 0
        leaked = a.num_pages - free - held - in_tree
        owner = m.ledger.owner[name]
        # count_nonzero, not sum: summing a bool array converts it to integers first.
        taken = owner > 0
        both = np.count_nonzero(taken & a._is_free)
        counted = int(m.ledger.held[name].sum())
        owned = np.count_nonzero(taken)  # < held when one page was taken twice
        last = m.seen_leaked.get(name, 0)
        tree_bad = 0
        if tree is not None:  # a tree page is neither free nor a request's, and the tree counts each once
            tree_bad = (np.count_nonzero(tree & a._is_free) + np.count_nonzero(tree & taken)
                        + abs(np.count_nonzero(tree) - in_tree))
        if leaked != last or both or counted != held or owned != held or tree_bad:
            out.append(Violation("K8", None, step, {
                "pool": name, "total": a.num_pages, "free": free, "held": held,
                "leaked": leaked, "new_leaks": leaked - last, "free_and_held": both,
                "held_twice": held - owned, "tree": in_tree, "tree_misplaced": tree_bad}))
        m.seen_leaked[name] = leaked
    return out


def check_k9(m: KVManager, step: int) -> list[Violation]:
    """K9: the compact-draft host bound of the extent (the host's estimate) is >= the exact length.

    Checked at the true length (committed) and at the longest exact length of any
    true length up to the estimate, through the sizing functions the engine plans
    with, so a wrong formula there is what this catches.
    """
    dw = m.mem.draft_window
    if dw is None:
        return []
    ps, out = m.ps, []
    for s in m.states.values():
        est = s.allocated
        # The exact length is t up to dw + ps - 1, then a saw-tooth of period ps that
        # peaks where (t - dw) % ps == ps - 1: the latest such t <= est is the worst.
        worst = est if est < dw + ps - 1 else est - (est - dw - (ps - 1)) % ps
        bound = sizing.compact_draft_bound(est, dw, ps)
        exact = max(sizing.compact_draft_len(s.committed, dw, ps), sizing.compact_draft_len(worst, dw, ps))
        if bound < exact:
            out.append(Violation("K9", s.rid, step, {
                "committed": s.committed, "estimate": est, "bound": bound, "exact": exact,
                "draft_window": dw}))
    return out


def check_k10(m: KVManager, step: int, batch: BatchArrays | None, mirror: Mirror | None = None) -> list[Violation]:
    """K10: the decode batch's arrays equal the live request states, and what the forward
    reads on the device equals the host.

    The batch arrays evolve by filter, merge, planned extents and accepted counts
    alone, so a wrong index or a missed step shows against the request states. With
    a model backend that keeps a device mirror of req_to_token and the SWA map (the
    tables its attention gathers slots from), each batch row's mirror equals the host
    row over the extent the step planned, and the mirror's SWA map equals the host
    map above the row's cursor: a host write the mirror missed is a forward reading
    the wrong KV. The accounting-only backend has no mirror; the first part still holds.
    """
    if batch is None:
        return []
    out = []
    rows = batch.rows
    states = list(map(m.states.get, rows.tolist()))
    if None in states or list(map(_RID, states)) != list(batch.rids):
        wrong = [s is None or s.rid != rid for s, rid in zip(states, batch.rids)]
    else:  # every row holds the request the batch names (a state is a view of its row)
        wrong = False
    if len(rows):
        # A row's arrays at a row that is not live are another (or no) request's: those
        # rows are wrong already, whatever the lengths say.
        kv = m.rows
        bad = (kv.committed[rows] != batch.committed) | (kv.allocated[rows] != batch.allocated) | wrong
        out = [Violation("K10", batch.rids[i], step, {"row": int(rows[i]), "reason": "batch != request state"})
               for i in np.flatnonzero(bad).tolist()]
    if mirror is not None and len(batch):
        out += _k10_mirror(m, step, batch, mirror)
    return out


def _k10_mirror(m: KVManager, step: int, batch: BatchArrays, mirror: Mirror) -> list[Violation]:
    rows = batch.rows
    # Positions below the planned extent: written before the step's forward and fixed
    # while the request lives, so the mirror synced at that forward must still equal them.
    ext = np.minimum(np.maximum(batch.allocated, 0), m.mem.row_width)  # np.clip: 4.3 us against 1.2 on 64 rows
    width = int(ext.max())
    if width == 0:
        return []
    host = m.req_to_token.host[rows, :width]
    cols = np.arange(width)
    live = cols[None, :] < ext[:, None]
    dev = np.asarray(mirror.rows(rows, width))
    bad = {int(i): "device row != host row" for i in np.flatnonzero(((dev != host) & live).any(axis=1))}
    if m.swa is not None:
        cursor = np.array([getattr(m.states.get(r), "swa_evicted", 0) for r in rows.tolist()], dtype=np.int64)
        above = live & (cols[None, :] >= cursor[:, None])
        slots = host[above]
        got = mirror.swa_of(slots)
        if got is not None:
            wrong = np.asarray(got) != m.swa.map_host[slots]
            for i in np.unique(np.nonzero(above)[0][wrong]).tolist():
                bad.setdefault(i, "device SWA map != host map")
    return [Violation("K10", batch.rids[i], step, {"row": int(rows[i]), "reason": why})
            for i, why in sorted(bad.items())]

