"""Declared models of kvbench's config files, and one way to say what is wrong with one.

Every file a user or CI writes (a suite and its expect rules, the runner registry,
the permissions file, a baseline) is checked by a pydantic model here, once, where it
is read. The first error becomes one line: the file, where in it (``runners.cpu.gpus``,
``expect[0].status``), what is allowed, and the value found. Models are strict where a
hand-written file could mislead: a bool is not an integer, "1" is not 1, and a key the
model does not declare is refused with the keys it allows (a misspelt key would
otherwise be ignored).

Only pydantic: the bot imports these (the ``ci`` extra), so nothing here may pull in
numpy, torch or MLflow.
"""

from __future__ import annotations

from typing import Annotated, Any, Callable, TypeVar

from pydantic import BaseModel, BeforeValidator, ConfigDict, ValidationError, model_validator

__all__ = ["Model", "check", "int_in", "one_line", "parse"]

M = TypeVar("M", bound=BaseModel)

# pydantic's error types in the project's words: "<where> must be ..." reads as a sentence.
TYPE_WORDS = {
    "int_type": "must be an integer", "int_parsing": "must be an integer", "int_from_float": "must be an integer",
    "float_type": "must be a number", "float_parsing": "must be a number",
    "bool_type": "must be true or false", "bool_parsing": "must be true or false",
    "string_type": "must be a string", "list_type": "must be a list", "tuple_type": "must be a list",
    "set_type": "must be a list", "frozen_set_type": "must be a list",
    "dict_type": "must be a table", "model_type": "must be a table", "model_attributes_type": "must be a table",
    "finite_number": "must be a finite number",
    "too_short": "must not be empty", "string_too_short": "must not be empty",
}
# Sentences that finish "<where> ..." (the rest are said after a colon).
PREDICATES = ("must ", "is ", "names ", "needs ")
# Parts of pydantic's error location that are not the file's own keys: a dict key's
# own check; the tags of a union's branches, spelt "(table)" etc. (suite.py), and
# validator names ("function-before[...]") are dropped by their first characters.
NOT_KEYS = ("[key]",)


class Model(BaseModel):
    """A config table: strict scalars, immutable, and unknown keys named with the allowed ones."""

    model_config = ConfigDict(strict=True, frozen=True, extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _known_keys(cls, data: Any) -> Any:
        if isinstance(data, dict) and cls.model_config.get("extra") == "forbid":
            allowed = list(cls.model_fields)
            unknown = [str(k) for k in data if k not in cls.model_fields]
            if unknown:
                keys = "keys" if len(unknown) > 1 else "key"
                names = ", ".join(repr(k) for k in unknown)
                raise ValueError(f"unknown {keys} {names} (allowed: {', '.join(allowed)})")
        return data


def check(test: Callable[[Any], bool], what: str, then: Callable[[Any], Any] | None = None) -> BeforeValidator:
    """A validator that keeps a value passing ``test`` (made ``then(value)``, if given)
    and says ``what`` it must be otherwise."""

    def run(value: Any) -> Any:
        if not test(value):
            raise ValueError(what)
        return then(value) if then is not None else value

    return BeforeValidator(run)


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def int_in(lo: int, hi: int | None = None) -> Any:
    """An integer within bounds (a bool or a float is refused), said as one range."""
    what = f"must be an integer from {lo} to {hi}" if hi is not None else f"must be an integer >= {lo}"
    return Annotated[int, check(lambda v: is_int(v) and v >= lo and (hi is None or v <= hi), what)]


def _where(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif str(part) in NOT_KEYS or str(part).startswith(("(", "function-")):
            continue
        else:
            # A key holding a newline or control character would break the one-line error: quoted.
            key = str(part) if str(part).isprintable() else repr(str(part))
            out += f".{key}" if out else key
    return out


def _short(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def one_line(err: ValidationError, source: str, tables: str = "table") -> str:
    """The first error of ``err`` as ``<source>: <where> <what is allowed> (got <value>)``;
    ``tables``: what the file's format calls a mapping (a TOML table, a JSON object)."""
    first = err.errors(include_url=False)[0]
    kind, ctx = first["type"], first.get("ctx") or {}
    if kind == "value_error":
        what = str(ctx.get("error", first["msg"]))
    elif kind == "missing":
        what = "is missing"
    elif kind == "literal_error":
        what = f"must be one of {str(ctx.get('expected', '')).replace(chr(39), '')}"
    elif kind == "extra_forbidden":
        what = "is not an allowed key"
    else:
        what = TYPE_WORDS.get(kind, first["msg"])
    what = what.replace("a table", f"an {tables}" if tables[0] in "aeiou" else f"a {tables}")
    where = _where(first["loc"])
    if kind == "missing" and first["loc"]:
        *head, key = first["loc"]
        where, what = _where(tuple(head)), f"missing key {key!r}"
    if not where and what.startswith(PREDICATES):
        where = "the file"
    text = f"{where} {what}" if where and what.startswith(PREDICATES) else f"{where}: {what}" if where else what
    value = first.get("input")
    # The value found, where it is one value (not the whole table) and not said already.
    says_value = kind != "missing" and "(got " not in what and not isinstance(value, dict)
    if says_value and (kind != "value_error" or what.startswith("must ")):
        text += f" (got {_short(value)})"
    return f"{source}: {text}"


def parse(model: type[M], data: Any, source: str, error: type[Exception], context: dict | None = None,
          tables: str = "table") -> M:
    """``data`` validated as ``model``; its first error raised as ``error`` with one line."""
    try:
        return model.model_validate(data, context=context)
    except ValidationError as err:
        raise error(one_line(err, source, tables)) from None
