"""docs/profiles.md's knob table is the profiles' own values (mini_engine/config/profiles.py), and
each flag it names is an option of the schema: the knob semantics live on that one page,
so its numbers must not drift from the code."""

from __future__ import annotations

import re

from harness.core.options import options
from mini_engine.config.profiles import PROFILES
from scripts_loader import ROOT

PAGE = (ROOT / "docs" / "profiles.md").read_text(encoding="utf-8")


def shown(profile, knob: str) -> str:
    """A knob's value as the page writes it."""
    if knob == "align":
        return "all" if profile.align_all else ",".join(profile.aligned_writers()) or "none"
    value = getattr(profile, knob)
    return ("on" if value else "off") if isinstance(value, bool) else str(value)


def knob_table() -> tuple[list[str], dict[str, list[str]]]:
    head = next(line for line in PAGE.splitlines() if line.startswith("| knob | flag |"))
    names = re.findall(r"`([\w.-]+)`", head)
    rows = {}
    for line in PAGE.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) == 2 + len(names) and re.fullmatch(r"[a-z_]+", cells[0]) and cells[0] != "knob":
            rows[cells[0]] = cells[1:]
    return names, rows


def test_the_knob_table_holds_every_profile_and_every_knob():
    names, rows = knob_table()
    assert names == list(PROFILES)
    knobs = set(PROFILES["sglang-0.5.23"].knobs()) - {"name", "what_if", "pd_radix_tail"}
    assert set(rows) == knobs


def test_each_value_is_the_profiles_own():
    names, rows = knob_table()
    for knob, (flag, *values) in rows.items():
        for name, value in zip(names, values):
            assert value == shown(PROFILES[name], knob), (knob, name, value)


def test_each_flag_named_is_an_option_of_the_schema():
    flags = {o.cli for o in options()}
    _, rows = knob_table()
    for knob, (flag, *_) in rows.items():
        if flag != "(profile only)":
            assert flag.strip("`") in flags, (knob, flag)
