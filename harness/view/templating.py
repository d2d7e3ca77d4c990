"""The report's HTML comes from Jinja2 templates (harness/view/templates/report/), one per section.

Autoescape is on for every template: a run's names, statuses, commits and options are
text that a config file, a pull request or a damaged night shapes, and a test id such
as ``<script>...`` must reach the page as text. Markup goes in unescaped only where a
template says ``|safe``, and only for values this package built and escaped itself:
the inline SVG charts (report_svg.py) and sections rendered here (named ``svg`` or
``*_html``; suites/unit/harness/test_report_escaping.py holds the templates to that).

StrictUndefined: a name a template uses and the code does not pass is an error, not
an empty cell that would drop a figure from the page unseen.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import jinja2

from harness.view.report_svg import fmt


def num(v: Any) -> str:
    """A figure in a table cell: '-' for none, a float to 6 significant digits."""
    if v is None:
        return "-"
    return f"{v:.6g}" if isinstance(v, float) else str(v)


@cache
def environment() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.PackageLoader("harness.view", "templates"), autoescape=True,
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True,
                             keep_trailing_newline=True)
    env.filters.update(num=num, fmt=fmt, grouped="{:,}".format)
    return env


def render(name: str, **values: Any) -> str:
    """The template ``report/<name>.html`` filled in; a plain str (Markup would escape what is added to it)."""
    return str(environment().get_template(f"report/{name}.html").render(**values))
