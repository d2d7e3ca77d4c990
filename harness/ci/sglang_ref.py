"""Which SGLang the nightly SGLang-regression job installs: a release or a git ref, as
one pip requirement (``kvbench ci sglang-requirement [REF]``).

The ref comes from a workflow input, so it is checked before it reaches pip: empty, the
newest release on the index; a release number (0.5.24, 0.5.24.post1, 0.6.0rc1), that
release; a commit (7 to 40 hex digits) or a branch or tag name of SGLang's repository
(letters, digits, ``._/-``, no ``..``, not starting with ``-``), that source tree's
``python/`` package.
"""

from __future__ import annotations

import re

from harness.core.errors import UsageError

REPO = "https://github.com/sgl-project/sglang"
RELEASE = re.compile(r"\d+(\.\d+){1,3}((a|b|rc)\d+)?(\.post\d+)?\Z")
GIT_REF = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/-]{0,99}\Z")


def requirement(ref: str) -> str:
    ref = ref.strip()
    if not ref:
        return "sglang"
    if RELEASE.match(ref):
        return f"sglang=={ref}"
    if GIT_REF.match(ref) and ".." not in ref and not ref.endswith((".lock", "/", ".")):
        return f"sglang @ git+{REPO}@{ref}#subdirectory=python"
    raise UsageError(f"--ref {ref[:80]!r}: give a release (0.5.24), a commit or a branch or tag of {REPO} "
                     f"(letters, digits, ._/-), or nothing for the newest release")
