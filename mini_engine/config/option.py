"""One option's declaration (``Option``: name, type, default, help, short id, bounds,
group) and its single-value checks.

It sits below everything that declares options: the algorithms declare theirs with it
(``mini_engine.algos``), ``mini_engine.config.options`` lists the engine's and joins the
algorithms' to them, and the harness declares the workload's (``harness.core.options``).
It imports nothing of the engine but its errors, so that no registry it describes has to
be loaded to declare an option.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Any, Callable

from mini_engine.errors import ConfigError, check_choice, check_positive

INT64_MAX = 2**63 - 1


@dataclass(frozen=True)
class Option:
    name: str
    type: type  # int, float, str or bool
    default: Any = None  # None: unset (the profile's, the algorithm's, or "off")
    help: str = ""
    short: str | None = None  # its spelling in test ids and result keys (default: the name)
    choices: tuple[str, ...] | Callable[[], tuple[str, ...]] | None = None  # a callable: a registry read late
    minimum: float | None = None
    maximum: float | None = None
    group: str = "engine"
    flag: str | None = None  # default: --name-with-dashes

    @property
    def id(self) -> str:
        return self.short or self.name

    @property
    def cli(self) -> str:
        return self.flag or "--" + self.name.replace("_", "-")

    @property
    def allowed(self) -> tuple[str, ...] | None:
        return self.choices() if callable(self.choices) else self.choices

    @property
    def annotation(self) -> str:
        name = self.type.__name__
        return name if self.default is not None else f"{name} | None"

    def check(self, value: Any) -> Any:
        """The value, validated (and a float option's int made a float); None passes (unset)."""
        if value is None:
            return None
        low = self.minimum if self.minimum is not None else -math.inf
        if self.type is int:
            value = check_positive(self.name, value, minimum=int(self.minimum if self.minimum is not None else 0))
            if self.maximum is not None and value > self.maximum:
                raise ConfigError(f"{self.name} must be an integer <= {int(self.maximum)} (got {value})")
            if value > INT64_MAX:  # every count ends in a numpy int64 array (OverflowError past it)
                raise ConfigError(f"{self.name} must be an integer <= {INT64_MAX} (got one of {len(str(value))} digits)")
            return value
        if self.type is float:
            if self.maximum is None:
                return check_float(self.name, value, low=low)
            if isinstance(value, bool) or not isinstance(value, numbers.Real) or not low <= value <= self.maximum:
                raise ConfigError(f"{self.name} must be a number in [{low}, {self.maximum}] (got {value!r})")
            return float(value)
        if self.type is bool:
            if not isinstance(value, bool):
                raise ConfigError(f"{self.name} must be true or false (got {value!r})")
            return value
        if self.allowed is not None:
            return check_choice(self.name, value, self.allowed)
        if not isinstance(value, str) or not value:
            raise ConfigError(f"{self.name} must be a non-empty string (got {value!r})")
        return value


def check_float(name: str, value: object, *, low: float) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
        raise ConfigError(f"{name} must be a number >= {low} (got {value!r})")
    if value < low:
        raise ConfigError(f"{name} must be a number >= {low} (got {value})")
    return float(value)


def dataclass_from(options: Callable[[], tuple[Option, ...]]) -> Callable[[type], type]:
    """A class decorator: declare each option of ``options()`` as a dataclass field
    (its name, its annotation, its default), ahead of the class's own fields, then
    make the dataclass. EngineConfig is built from the engine's schema, the
    harness's WorkloadConfig from the workload's."""
    def make(cls: type) -> type:
        own = dict(cls.__dict__.get("__annotations__", {}))
        declared = {}
        for o in options():
            declared[o.name] = o.annotation
            setattr(cls, o.name, o.default)
        cls.__annotations__ = {**declared, **own}
        return dataclass(cls)
    return make
