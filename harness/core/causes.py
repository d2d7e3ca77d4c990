"""One-line error text that keeps the cause.

Library errors put the reason last: requests writes "Max retries exceeded with url:
... (Caused by NewConnectionError(...: [Errno 111] Connection refused))". Cutting
such a message at a fixed width keeps the boilerplate and drops the one part a
user needs, so a long message keeps its head and its tail, and an exception
chained from another names that cause too.
"""

from __future__ import annotations

LIMIT = 400


def root_cause(err: BaseException) -> BaseException:
    seen = {id(err)}
    while True:
        nxt = err.__cause__ or (None if err.__suppress_context__ else err.__context__)
        if nxt is None or id(nxt) in seen:
            return err
        seen.add(id(nxt))
        err = nxt


def one_line(err: BaseException, limit: int = LIMIT) -> str:
    """``Type: message`` on one line, at most ``limit`` characters, cause kept."""
    text = f"{type(err).__name__}: {' '.join(str(err).split())}"
    root = root_cause(err)
    if root is not err:
        why = " ".join(str(root).split())
        if why not in text:
            text += f" (caused by {type(root).__name__}: {why})"
    if len(text) <= limit:
        return text
    keep = (limit - 5) // 2
    return f"{text[:keep]} ... {text[-keep:]}"
