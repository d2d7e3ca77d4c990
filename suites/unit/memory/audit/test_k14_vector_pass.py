"""K14's one map read over every node of the SWA-aware tree (tree_checks._k14_suspects)
clears only nodes that the node-by-node test (_k14_node) clears: K14 reports, in words
and order, what reading each node alone reports, whatever corrupts the map or a node."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from mini_engine.memory.audit.tree_checks import _k14_node, swa_tree_violations
from mini_engine.memory.tree.swa_radix import SWARadixCache

PS, WINDOW = 4, 8


def tree_of(prompts: list[list[int]], evicted: list[int]) -> tuple[SWARadixCache, np.ndarray]:
    """A tree holding the prompts, each inserted with its window cursor at evicted (pages)."""
    swa_map = np.zeros(4096, dtype=np.int64)
    tree = SWARadixCache(PS, WINDOW, swa_map, lambda slots: None, lambda full: swa_map.__setitem__(full, 0))
    nxt = 4
    for tokens, ev in zip(prompts, evicted):
        full = np.arange(nxt, nxt + len(tokens), dtype=np.int64)
        nxt += len(tokens)
        swa_map[full] = full + 2000
        cursor = min(ev * PS, len(tokens) // PS * PS)
        swa_map[full[:cursor]] = 0
        tree.insert(tokens, full, evicted=cursor)
    return tree, swa_map


prompt = st.lists(st.integers(1, 3), min_size=PS, max_size=6 * PS).map(lambda t: t[: len(t) // PS * PS])
fault = st.tuples(st.sampled_from(["map", "node"]), st.integers(0, 40), st.integers(0, 4095))


@settings(max_examples=150, deadline=None)
@given(prompts=st.lists(prompt, min_size=1, max_size=4), evicted=st.lists(st.integers(0, 4), min_size=4, max_size=4),
       faults=st.lists(fault, max_size=3))
def test_k14_vector_pass_reports_what_the_node_test_reports(prompts, evicted, faults):
    tree, swa_map = tree_of(prompts, evicted)
    nodes = list(tree.nodes())
    for kind, i, v in faults:
        x = nodes[i % len(nodes)]
        if kind == "map":  # any SWA slot (or none) for one of the node's FULL slots
            swa_map[x.full[i % len(x.full)]] = v
        elif x.swa is not None:  # the node's own record of its SWA slots
            x.swa = x.swa.copy()
            x.swa[i % len(x.swa)] = v
    slots = [(v.values.get("node"), v.values.get("reason"), v.values.get("swa"))
             for v in swa_tree_violations(tree) if v.values.get("reason") != "sizes"]
    each = [(v.values["node"], v.values["reason"], v.values.get("swa"))
            for x in tree.nodes() if (v := _k14_node(tree, x, 0)) is not None]
    assert slots == each
