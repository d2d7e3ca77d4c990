"""Which SGLang a trace conforms against, and what differs in SGLang 0.5.18's API.

A trace records its profile (the header's profile.name); each profile is one SGLang
release (mini_engine.config.profiles.SGLANG_VERSIONS). kvbench conform replays on whichever
SGLang is installed, so it refuses a trace of another release in one line: its
allocator and sizing rules are not the installed one's to judge. A trace without a
profile name (a memory-only caller's) is checked on any version.

SGLang 0.5.18 (the pre-35265 profile's release) lacks two calls conform makes on
0.5.23, so the replay reaches the same code by 0.5.18's own entry points:

* free_page_ids (page ids straight onto the free list) does not exist: the same pages
  go through free_segment, given each page's slots from its first (free_segment takes
  one representative per page by stride, no unique), which puts them where
  free_page_ids would, in the order given;
* page_aligned_decode_alloc_lens (added by PR 35265) does not exist: 0.5.18 computes
  the aligned reservation inline in eagle_prepare_for_decode, max(cur,
  ceil_ps(committed + reserve)), reproduced here.
"""

from __future__ import annotations

from types import SimpleNamespace

from harness.core.errors import HarnessError
from mini_engine.errors import TraceError
from mini_engine.config.profiles import SGLANG_VERSIONS


class SGLangMissing(HarnessError):
    """SGLang's code a replay runs does not import here: its allocator and sizing modules,
    UnifiedRadixCache's serving stack, or one of the small packages they import."""


def trace_version(path: str, head: dict) -> str | None:
    """The SGLang release the trace's profile is, or None when the header names no profile."""
    profile = head.get("profile") or {}
    name = profile.get("name")
    if name is None:
        return None
    if name not in SGLANG_VERSIONS:
        raise TraceError(f"{path}: header profile {name!r} is not one of {', '.join(SGLANG_VERSIONS)}")
    return SGLANG_VERSIONS[name]


def check_version(path: str, head: dict, installed: str) -> None:
    """TraceError (one line, exit 2) when the trace's profile is another SGLang release."""
    want = trace_version(path, head)
    if want is not None and want != installed:
        name = head["profile"]["name"]
        raise TraceError(f"{path}: recorded under profile {name}, which is SGLang {want}, but SGLang {installed} "
                         f"is installed; conform it where SGLang {want} is (docs/conform.md)")


def full_tree_is_unified(installed: str) -> bool:
    """Which tree the installed SGLang builds for a full-attention model: 0.5.18's
    default chain ends at RadixCache; 0.5.23's builds UnifiedRadixCache with the FULL
    component (mem_cache/registry.py in each)."""
    return not installed.startswith("0.5.18")


def free_page_ids(sg: SimpleNamespace, alloc, page_ids) -> None:
    """Put page ids on the free list: free_page_ids where it exists, else 0.5.18's free_segment."""
    if hasattr(alloc, "free_page_ids"):
        alloc.free_page_ids(page_ids)
        return
    torch, ps = sg.torch, alloc.page_size
    if ps == 1:  # the token allocator: its free appends the slots as given
        alloc.free(page_ids)
        return
    slots = (page_ids[:, None] * ps + torch.arange(ps, dtype=page_ids.dtype)[None, :]).reshape(-1)
    alloc.free_segment(slots, start_pos=0)


def aligned_nxt(sg: SimpleNamespace, cur: int, committed: int, reserve: int, ps: int) -> int:
    """The aligned reservation: SGLang's page_aligned_decode_alloc_lens, or 0.5.18's inline rule."""
    lens = getattr(sg.sizing, "page_aligned_decode_alloc_lens", None)
    if lens is None:
        return max(cur, (committed + reserve + ps - 1) // ps * ps)  # 0.5.18 eagle_prepare_for_decode
    req = SimpleNamespace(kv=SimpleNamespace(kv_allocated_len=cur, kv_committed_len=committed))
    _, nxts, _ = lens([req], reserve=reserve, page_size=ps)
    return int(nxts[0])
