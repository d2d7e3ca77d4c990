"""check_all: every state check over a KVManager after a step, K1-K10 and K12-K14."""

from __future__ import annotations

from typing import TYPE_CHECKING

from mini_engine.memory.audit.live import Live
from mini_engine.memory.audit.pool_checks import (Mirror, check_k1, check_k2, check_k3, check_k4, check_k5, check_k6,
                                                  check_k7, check_k8, check_k9, check_k10)
from mini_engine.memory.audit.record import Violation
from mini_engine.memory.audit.tree_checks import check_k12, check_k13, check_k14

if TYPE_CHECKING:
    from mini_engine.memory.batch import BatchArrays
    from mini_engine.memory.manager import KVManager


def check_all(m: KVManager, step: int, batch: BatchArrays | None = None,
              mirror: Mirror | None = None) -> list[Violation]:
    live = Live(m)
    found = (check_k1(m, step, live) + check_k2(m, step, live) + check_k3(m, step, live)
             + check_k4(m, step, live) + check_k5(m, step) + check_k6(m, step, live) + check_k7(m, step, live)
             + check_k8(m, step) + check_k9(m, step) + check_k10(m, step, batch, mirror)
             + check_k12(m, step) + check_k13(m, step) + check_k14(m, step))
    m.seen.take(live)
    return found
