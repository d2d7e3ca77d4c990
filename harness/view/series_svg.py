"""One config's per-step series as a standalone SVG: the chart each config run carries.

Stranded and reserved-but-unwritten slots above, pages held (and SWA pages held)
below, against the step. Drawn for every config of a sweep while it runs, so it is
plain strings (report_svg's line chart) rather than a plotting library: matplotlib
cost a fifth of a second a config, as much as the rest of its MLflow upload. MLflow
previews an .svg artifact as an image.
"""

from __future__ import annotations

from html import escape
from typing import Any

from harness.view.report_svg import PALETTE, line_chart

W, H = 720, 220
# The report's page styles its charts; a file on its own carries the few rules they need.
STYLE = ("<style>text{font:11px sans-serif;fill:#222}.mono{font-family:monospace}.plot{fill:#fff;stroke:#999}"
         ".grid{stroke:#e5e5e5}.line{fill:none;stroke-width:1.5}</style>")
PANELS = ((("stranded", "stranded slots"), ("reserved", "reserved-but-unwritten slots")), "slots"), \
         ((("held", "pages held"), ("swa_held", "SWA pages held")), "pages")


def series_svg(row: dict[str, Any]) -> str | None:
    """The SVG document, or None for a row without per-step series."""
    series = {k: v for k, v in (row.get("series") or {}).items() if isinstance(v, list) and v}
    charts = []
    for names, unit in PANELS:
        lines = [{"label": text, "values": [float(v) for v in series[name]]} for name, text in names if name in series]
        if lines:
            charts.append((lines, unit))
    if not charts:
        return None
    title = str(row.get("test_id") or row.get("key"))[:110]
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {W} {30 + (H + 24) * len(charts)}" '
           f'width="{W}" height="{30 + (H + 24) * len(charts)}">', STYLE,
           f'<rect width="100%" height="100%" fill="#fff"/><text x="8" y="18" style="font-weight:bold">'
           f'{escape(title)}: per step</text>']
    for k, (lines, unit) in enumerate(charts):
        top = 30 + (H + 24) * k
        steps = max(len(s["values"]) for s in lines)
        xlabels = [str(i) for i in range(steps)]
        for s in lines:  # a shorter series (none here today) is padded with gaps, not stretched
            s["values"] += [None] * (steps - len(s["values"]))
        out.append(f'<g transform="translate(0 {top})">'
                   + line_chart(f"{unit} per step", xlabels, lines, f"{unit}", f"series-{unit}", size=(W, H),
                                legend=False, cls="series", points=False)
                   + "</g>")
        out.append(f'<text x="80" y="{top + H + 14}">step \u2192 &#160; '
                   + "&#160; ".join(f'<tspan style="fill:{PALETTE[i]}">\u25a0</tspan> {escape(s["label"])}'
                                    for i, s in enumerate(lines)) + "</text>")
    out.append("</svg>")
    return "\n".join(out)
