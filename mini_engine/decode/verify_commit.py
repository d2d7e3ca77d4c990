"""How many tokens a verify commits when its accepted run reaches the output limit.

A verify accepts a run of tokens (the bonus included) and the request keeps the first
``left`` of them as outputs (its remaining ones, max_new_tokens - outputs). The KV the
verify wrote is committed as the profile's release does it:

* "cut" (kvbench's designs): the commit stops where the outputs stop, min(run, left).
* "owned" (SGLang 0.5.23): _resolve_spec_v2_tokens commits the whole run
  (kv_committed_len += accept length), update_finish_state then sets finished_len =
  max_new_tokens, and release_kv_cache keys the tree on owned_kv_len = min(committed,
  prompt + finished_len), freeing the rest as over-allocation. The committed length trails
  the outputs by one (the last output's KV is written by the next forward), so a run that
  overshoots the limit leaves prompt + max_new_tokens to the tree: left + 1 tokens of its
  run, one more than a run that ends exactly on the limit (left tokens). Committing
  min(run, left + 1) is therefore what reaches the tree, and nothing past it is ever read
  (the request finishes in this very result).
* "whole" (SGLang 0.5.18): the whole run is committed and release_kv_cache hands the tree
  effective_kv_committed_len, the committed length with no cap at the finish: the run's
  ids past the limit (Request.beyond, which no client sees) are keyed into the tree too.
"""

from __future__ import annotations

import numpy as np


def committed(run: np.ndarray, left: np.ndarray, rule: str) -> np.ndarray:
    """Tokens each request of a verify batch commits: run, its accepted runs; left, its
    outputs still to go before this result."""
    if rule == "whole":
        return run
    if rule == "owned":
        return np.minimum(run, left + 1)
    return np.minimum(run, left)
