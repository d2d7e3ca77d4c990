"""A Req's figures the reference reads, under each release's name for them."""

from __future__ import annotations


def extend_len(req) -> int:
    """Tokens the request's extend computes in this batch: 0.5.23's ``extend_len``, 0.5.18's
    ``extend_range.length``."""
    n = getattr(req, "extend_len", None)
    return int(n) if n is not None else int(req.extend_range.length)


def pool_idx(req):
    """Its req_to_token row (None once released): 0.5.23 keeps it in ``req.kv``, 0.5.18 on the Req."""
    kv = req.kv
    return kv.req_pool_idx if hasattr(kv, "req_pool_idx") else req.req_pool_idx


def committed(req) -> int:
    """``kv_committed_len``: 0.5.23's ``req.kv``, 0.5.18's Req."""
    kv = req.kv
    return kv.kv_committed_len if hasattr(kv, "kv_committed_len") else req.kv_committed_len
