"""Shared prefixes: every synthetic prompt starts with one of prefix_groups system prompts.

A prompt is its group's shared_prefix tokens followed by its own part, whose length
is the workload's input-length draw (input_len keeps meaning "the request's own
tokens"): adding a prefix adds shared tokens and leaves the per-request work and its
random draws as they were, so a run with and without a prefix differs only by it.
SGLang's generated-shared-prefix benchmark splits a prompt the same way (a system
prompt plus a question).

Request i takes prefix i mod prefix_groups (round-robin, not a seeded draw): every
group gets its share, and consecutive arrivals alternate between groups, the
interleaving a radix cache has to keep apart. The groups' first tokens differ, so
two groups share no token of the tree; all the prefixes' ids come from a stream of
their own, so the requests' own tokens do not depend on the prefix options.
"""

from __future__ import annotations

from typing import Any

from harness.core.errors import UsageError

_STREAM = 0x9F1  # the prefixes' own draw, beside the workload's (harness/core/workloads.py)


def check_sharing(wl: Any) -> None:
    """The rules that tie the prefix options to the others (each alone is checked by the schema)."""
    if wl.prefix_groups > 1 and wl.shared_prefix == 0:
        raise UsageError(f"prefix_groups={wl.prefix_groups} needs a shared_prefix >= 1 (the groups' prefixes "
                         f"are shared_prefix tokens long)")
    if wl.prefix_groups > wl.prompt_vocab:
        raise UsageError(f"prefix_groups must be <= prompt_vocab={wl.prompt_vocab}, so the groups' prefixes start "
                         f"with different tokens (got {wl.prefix_groups})")


def check_fits(shared_prefix: int, max_context: int) -> None:
    """A request is its prefix, at least one own token and one output token."""
    if shared_prefix + 2 > max_context:
        raise UsageError(f"shared_prefix={shared_prefix} leaves no room in max_context={max_context} for a "
                         f"request's own prompt token and output token; allowed: shared_prefix <= "
                         f"{max(max_context - 2, 0)}, or raise max_context")


def prefixes(wl: Any, seed: int) -> list[list[int]]:
    """The prefixes the requests use (none when shared_prefix is 0), as token id lists: one per
    group, but never more than there are requests (a group beyond them would be drawn for nothing)."""
    import numpy as np  # numpy: optional, loaded only on this path

    if wl.shared_prefix == 0:
        return []
    rng = np.random.default_rng([seed, _STREAM])
    firsts = rng.choice(wl.prompt_vocab, size=min(wl.prefix_groups, wl.num_requests), replace=False)
    out = []
    for first in firsts.tolist():
        rest = rng.integers(0, wl.prompt_vocab, wl.shared_prefix - 1).tolist()
        out.append([first, *rest])
    return out


def group_of(i: int, groups: int) -> int:
    """The prefix group of request (or session) i: round-robin."""
    return i % groups
