"""Decoding algorithms by name: ``get("dflash")`` is the DFLASH object.

Adding an algorithm is one module with an ``Algorithm`` subclass, registered here.
"""

from __future__ import annotations

from mini_engine.algos.base import ROW_HEADROOM_RULES, Algorithm
from mini_engine.algos.dflash import DFlash
from mini_engine.algos.eagle import Eagle
from mini_engine.algos.none import Plain
from mini_engine.errors import check_choice

ALGORITHMS: dict[str, Algorithm] = {a.name: a for a in (Plain(), Eagle(), DFlash())}
SPECS = tuple(ALGORITHMS)


def get(name: str) -> Algorithm:
    return ALGORITHMS[check_choice("spec", name, SPECS)]


__all__ = ["ALGORITHMS", "ROW_HEADROOM_RULES", "SPECS", "Algorithm", "get"]
