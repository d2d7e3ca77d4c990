"""`kvbench sweep --filter`: which configs of a suite a filter expression selects.

The grammar is pytest's ``-k`` (``and``, ``or``, ``not``, parentheses), parsed by
pytest's own parser, so an expression pytest would reject is refused here in one
line. A word ``name:value`` or ``name=value`` whose name is an option (its short
name from the test ids, ``ps``, or its full name, ``page_size``) matches that
option's value exactly: ``ps:1`` does not select ``ps:16`` and ``ps:3`` does not
match ``steps:3`` (``ps:1-``, the old way to say it, still works). Any other word
keeps ``-k``'s meaning, a case-insensitive substring of the test name (``dflash``,
``pre-35265``, or several id parts such as ``ps:16-window:none``).

The grid plugin applies the filter itself (pytest never sees it as ``-k``), so
the sweep's count and pytest's selection are the same function.
"""

from __future__ import annotations

import re
from typing import Any, Callable

from harness.core.errors import UsageError
from harness.core.options import ID_ALIASES, option_names, short_names
from harness.core.workloads import WorkloadConfig
from mini_engine.config.engine_config import EngineConfig


_ASSIGN = re.compile(r"(?<=\w)=(?=[\w.+\-/:])")


def _option_names() -> dict[str, str]:
    names = {n.lower(): n for n in option_names()}
    names.update({old.lower(): full for old, full in ID_ALIASES.items()})  # the ids' older spellings
    names.update({short.lower(): full for full, short in short_names().items()})
    return names


def _defaults() -> dict[str, Any]:
    fields = {**EngineConfig.__dataclass_fields__, **WorkloadConfig.__dataclass_fields__}
    return {name: f.default for name, f in fields.items()}


_PART = re.compile(r"(?:^|-)([A-Za-z_]+):")


def id_options(test_id: str) -> dict[str, str]:
    """The name:value parts of a test id, as spelt there (values may hold ':' or '-')."""
    found = list(_PART.finditer(test_id))
    out = {}
    for m, nxt in zip(found, [*found[1:], None]):
        out[m.group(1)] = test_id[m.end(): nxt.start() if nxt else len(test_id)]
    return out


def compile_filter(expr: str) -> Callable[[str, dict[str, Any]], bool]:
    """(test id, config) -> selected. Raises UsageError for a malformed expression."""
    from _pytest.mark.expression import Expression  # pytest: optional, loaded only on this path

    from harness.grid.suites import fmt_value  # pydantic: optional, loaded only on this path

    text = _ASSIGN.sub(":", expr.strip())
    if not text:
        raise UsageError("--filter must not be empty (a pytest -k expression over the test ids, e.g. 'dflash and ps=16')")
    try:
        compiled = Expression.compile(text)
    except Exception as err:  # ParseError (older pytest) or SyntaxError
        raise UsageError(f"--filter {expr!r} is not a valid expression: {str(err).splitlines()[0]}") from None
    names = _option_names()
    defaults = _defaults()

    def selects(test_id: str, config: dict[str, Any] | None = None) -> bool:
        name = f"test_config[{test_id}]".lower()
        if config is None:  # only the id is known (a baseline row): its name:value parts
            config = {names[k.lower()]: v for k, v in id_options(test_id).items() if k.lower() in names}

        def match(word: str, /, **kwargs: Any) -> bool:
            if kwargs:
                raise UsageError(f"--filter {expr!r}: keyword arguments are not supported (write name:value)")
            key, sep, want = word.partition(":")
            option = names.get(key.lower()) if sep else None
            want = want[:-1] if want.endswith("-") else want  # 'ps:1-', the old -k spelling of exact
            if option is None or _PART.search("-" + want):
                return word.lower() in name  # not an option, or several id parts: -k's substring
            value = config.get(option, defaults.get(option))
            return fmt_value(value).lower() == want.lower()

        return bool(compiled.evaluate(match))

    # Evaluate once on an empty config: a kwargs word fails now, not inside pytest.
    selects("", {})
    return selects
