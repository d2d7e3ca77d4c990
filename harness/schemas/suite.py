"""The suite file (suites/*.toml) and its [[expect]] rules, as declared models.

What each table means is in harness/grid/suites.py and harness/judge/expect.py; this file says
only what may be written. Names that depend on the code (engine and workload options,
the metrics a row carries) come in the validation context as ``options`` and
``metrics``, so a misspelt one is refused when the suite loads, not after its run.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Optional, Union

from pydantic import BeforeValidator, Discriminator, Field, Tag, ValidationInfo, model_validator

from harness.core.metrics import INVARIANTS, STATUSES
from harness.core.options import by_name
from harness.schemas import Model, check, int_in
from mini_engine.errors import KVBenchError

MAX_REPEAT = 100  # timing samples per config; more is a typo, not a measurement
KNOWN_MARKS = ("gpu", "nightly", "slow")


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _known(info: ValidationInfo, what: str) -> Any:
    return (info.context or {}).get(what)


def _metric_name(name: Any, info: ValidationInfo) -> Any:
    known = _known(info, "metrics")
    if known is not None and not (name in known or str(name).startswith("mem_")):
        raise ValueError(f"unknown metric {name!r} (known: {', '.join(sorted(known))})")
    return name


def _option_name(name: Any, info: ValidationInfo) -> Any:
    known = _known(info, "options")
    if known is not None and name not in known:
        raise ValueError(f"unknown option {name!r}")
    return name


def _invariant(name: Any) -> Any:
    if name not in INVARIANTS:
        raise ValueError(f"unknown invariant {name!r} (allowed: K1 to K14)")
    return name


def _number_or_metric(value: Any, info: ValidationInfo) -> Any:
    # A string where a number belongs names another metric of the same row.
    if isinstance(value, str):
        known = _known(info, "metrics")
        if known is not None and not (value in known or value.startswith("mem_")):
            raise ValueError(f"names unknown metric {value!r} (known: {', '.join(sorted(known))})")
        return value
    if not _is_number(value):
        raise ValueError("must be a number or a metric name")
    return value


def _statuses(value: Any) -> Any:
    listed = [value] if isinstance(value, str) else value
    # An empty list is a status no run can have: every matching config would be unexpected.
    if not (isinstance(listed, list) and listed and all(s in STATUSES for s in listed)):
        raise ValueError(f"must be one of {', '.join(STATUSES)} or a non-empty list of them")
    return list(listed)


Number = Annotated[Any, check(_is_number, "must be a number")]
MetricRef = Annotated[Any, BeforeValidator(_number_or_metric)]
# "none": the figure must be unset (TOML has no null).
MetricValue = Annotated[Any, BeforeValidator(lambda v, info: v if v == "none" else _number_or_metric(v, info))]
MetricName = Annotated[str, BeforeValidator(_metric_name)]
OptionName = Annotated[str, BeforeValidator(_option_name)]
InvariantId = Annotated[str, BeforeValidator(_invariant)]


def _ordered(bounds: Any) -> Any:
    # min > max holds for no value: a rule that can never match or never hold.
    low, high = bounds.min, bounds.max
    if _is_number(low) and _is_number(high) and low > high:
        raise ValueError(f"min {low} is above max {high}: no value lies between")
    return bounds


class WhenBounds(Model):
    """An option's range in ``when``: numbers only (an option is not a metric)."""

    min: Optional[Number] = None
    max: Optional[Number] = None
    equals: Any = None

    @model_validator(mode="after")
    def _min_below_max(self) -> Any:
        return _ordered(self)


class Bounds(Model):
    """A figure's range: a number, or the name of another metric of the row."""

    min: Optional[MetricRef] = None
    max: Optional[MetricRef] = None
    equals: Optional[MetricValue] = None

    @model_validator(mode="after")
    def _min_below_max(self) -> Any:
        return _ordered(self)


def _form(value: Any) -> str:
    return "(table)" if isinstance(value, dict) else "(list)" if isinstance(value, list) else "(value)"


# A condition: a value (equal), a list (one of) or a table {min, max, equals}.
WhenCondition = Annotated[Union[Annotated[WhenBounds, Tag("(table)")], Annotated[list, Tag("(list)")],
                                Annotated[Any, Tag("(value)")]], Discriminator(_form)]
Condition = Annotated[Union[Annotated[Bounds, Tag("(table)")], Annotated[list, Tag("(list)")],
                            Annotated[MetricValue, Tag("(value)")]], Discriminator(_form)]


class RuleFile(Model):
    """One [[expect]] table."""

    name: Optional[str] = None
    when: dict[OptionName, WhenCondition] = {}
    status: Annotated[Optional[list[str]], BeforeValidator(_statuses)] = None
    metrics: dict[MetricName, Condition] = {}
    violations: dict[InvariantId, Condition] = {}

    @model_validator(mode="after")
    def _when_can_match(self, info: ValidationInfo) -> "RuleFile":
        # A when value no config can have ("16" for an int option, a spec that does
        # not exist) matches nothing, silently: refused here, against the option's own check.
        if _known(info, "options") is None:
            return self

        specs = by_name()
        for key, cond in self.when.items():
            problem = _when_problem(specs[key], cond)
            if problem:
                rule = f"rule {self.name!r}: " if self.name is not None else ""
                raise ValueError(f"{rule}when.{key} can never match: {problem}")
        return self


def _when_problem(option: Any, cond: Any) -> str | None:
    """Why ``cond`` can match no value of ``option`` (None: it can)."""

    if isinstance(cond, WhenBounds):
        if (cond.min is not None or cond.max is not None) and option.type not in (int, float):
            return f"min/max bound a number and {option.name} is not one"
        values = [cond.equals] if "equals" in cond.model_fields_set else []
    elif isinstance(cond, list):
        if not cond:
            return "an empty list matches nothing"
        values = cond
    else:
        values = [cond]
    for value in values:
        if value == "none":  # "not set" (TOML has no null)
            continue
        try:
            option.check(value)
        except (KVBenchError, TypeError, ValueError) as err:
            return str(err)
    return None


def _non_empty_list(value: Any) -> bool:
    return isinstance(value, list) and bool(value)


class SuiteFile(Model):
    """The top level of a suite file."""

    name: Optional[Annotated[str, Field(min_length=1)]] = None
    description: str = ""
    repeat: int_in(1, MAX_REPEAT) = 1  # type: ignore[valid-type]
    marks: list[Literal[KNOWN_MARKS]] = []  # type: ignore[valid-type]
    defaults: dict[str, Any] = {}
    axes: dict[str, Annotated[list, check(_non_empty_list, "must be a non-empty list")]] = {}
    include: list[dict[str, Any]] = []
    exclude: list[dict[OptionName, Any]] = []  # a misspelt option would silently exclude nothing
    expect: list[RuleFile] = []

    @model_validator(mode="after")
    def _tables_keep_off_axes(self) -> "SuiteFile":
        # A table in one axis setting another axis's option overrides that axis in
        # every combo: the grid silently holds fewer configs than its ids say.
        for axis, values in self.axes.items():
            for value in values:
                if isinstance(value, dict):
                    for key in value:
                        if key != axis and key in self.axes:
                            raise ValueError(f"axes.{axis}: a table sets {key!r}, which is also an axis "
                                             f"(make it one axis, or set {key!r} only in the tables)")
        return self


def plain(cond: Any) -> Any:
    """A validated condition as the judge reads it: a table back to a dict of the bounds given."""
    return cond.model_dump(exclude_unset=True) if isinstance(cond, Model) else cond
