"""Inline SVG charts for the HTML report: a line chart over runs and a heatmap.

Plain strings, no plotting library and nothing fetched: the page must open from
a CI artifact with no network. Every text that came from a run is escaped.
"""

from __future__ import annotations

import math
from html import escape

# Okabe-Ito: told apart with the common colour-vision deficiencies.
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000")
W, H = 960, 280
LEFT, RIGHT, TOP, BOTTOM = 70, 48, 16, 44


def nice_ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    """Round tick values covering [lo, hi]."""
    if hi == lo:
        span = abs(hi) or 1.0
        # A constant non-negative figure (a counter at 0) gets no negative axis.
        lo, hi = (max(0.0, lo - span / 2) if lo >= 0 else lo - span / 2), hi + span / 2
    raw = (hi - lo) / max(1, n - 1)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    first = math.floor(lo / step) * step
    ticks = []
    t = first
    while t <= hi + step * 1e-9:
        ticks.append(round(t, 12))
        t += step
    if ticks[-1] < hi:
        ticks.append(round(t, 12))
    return ticks


def fmt(v: float) -> str:
    if v == 0:
        return "0"
    a = abs(v)
    if a >= 1e6 or a < 1e-3:
        return f"{v:.3g}"
    return f"{v:.6g}" if float(v).is_integer() else f"{v:.4g}"


def line_chart(title: str, xlabels: list[str], series: list[dict], y_label: str, chart_id: str,
               size: tuple[int, int] = (W, H), legend: bool = True, cls: str = "trend",
               marks: list[tuple[int, int, str]] = (), points: bool = True) -> str:
    """``series``: dicts with ``label``, ``values`` (one per x, None where absent) and
    optionally ``spread`` (per x, (low, high) or None): drawn as error bars. ``marks``:
    steps (x before, x after, label), a dashed line between the two runs, as asv marks them.
    ``points=False``: lines alone (a per-step series of hundreds of points)."""
    ys = [v for s in series for v in s["values"] if v is not None]
    ys += [b for s in series for sp in s.get("spread") or [] if sp for b in sp]
    if not ys:
        return f'<p class="empty">{escape(title)}: no values</p>'
    ticks = nice_ticks(min(ys), max(ys))
    lo, hi = ticks[0], ticks[-1]
    w, h = size
    pw, ph = w - LEFT - RIGHT, h - TOP - BOTTOM
    n = len(xlabels)

    def x(i: int) -> float:
        return LEFT + (pw / 2 if n == 1 else pw * i / (n - 1))

    def y(v: float) -> float:
        return TOP + ph * (1 - (v - lo) / ((hi - lo) or 1))

    out = [f'<svg class="{cls}" id="{escape(chart_id)}" viewBox="0 0 {w} {h}" width="{w}" height="{h}" '
           f'role="img" aria-label="{escape(title)}" xmlns="http://www.w3.org/2000/svg">',
           f'<rect x="{LEFT}" y="{TOP}" width="{pw}" height="{ph}" class="plot"/>']
    for t in ticks:
        out.append(f'<line x1="{LEFT}" x2="{LEFT + pw}" y1="{y(t):.1f}" y2="{y(t):.1f}" class="grid"/>'
                   f'<text x="{LEFT - 6}" y="{y(t) + 4:.1f}" text-anchor="end">{fmt(t)}</text>')
    every = max(1, math.ceil(n / 12))  # at most a dozen x labels
    for i, label in enumerate(xlabels):
        if (i % every == 0 and n - 1 - i >= every / 2) or i == n - 1:  # the last label never overdrawn
            out.append(f'<text x="{x(i):.1f}" y="{h - BOTTOM + 16}" text-anchor="middle" class="mono">'
                       f'{escape(label)}</text>')
    out.append(f'<text x="14" y="{TOP + ph / 2:.1f}" transform="rotate(-90 14 {TOP + ph / 2:.1f})" '
               f'text-anchor="middle">{escape(y_label)}</text>')
    for before, after, label in marks:
        mx = (x(before) + x(after)) / 2
        out.append(f'<g class="step"><line x1="{mx:.1f}" x2="{mx:.1f}" y1="{TOP}" y2="{TOP + ph}" '
                   f'stroke="#b3261e" stroke-dasharray="4 3"/><text x="{mx + 4:.1f}" y="{TOP + 12}" '
                   f'style="fill:#b3261e">{escape(label)}</text><title>step between {escape(xlabels[before])} and '
                   f'{escape(xlabels[after])}: {escape(label)}</title></g>')
    for k, s in enumerate(series):
        color = PALETTE[k % len(PALETTE)]
        pts = [(x(i), y(v), v, i) for i, v in enumerate(s["values"]) if v is not None]
        for i, sp in enumerate(s.get("spread") or []):
            if sp and sp[1] > sp[0]:
                out.append(f'<line x1="{x(i):.1f}" x2="{x(i):.1f}" y1="{y(sp[0]):.1f}" y2="{y(sp[1]):.1f}" '
                           f'stroke="{color}" class="err"><title>{escape(s["label"])}\n{escape(xlabels[i])}: '
                           f'{fmt(sp[0])} .. {fmt(sp[1])} over the repeats</title></line>')
        if len(pts) > 1:
            path = " ".join(f"{px:.1f},{py:.1f}" for px, py, _, _ in pts)
            out.append(f'<polyline points="{path}" stroke="{color}" class="line"/>')
        for px, py, v, i in pts if points or len(pts) == 1 else ():
            out.append(f'<circle cx="{px:.1f}" cy="{py:.1f}" r="3.5" fill="{color}">'
                       f'<title>{escape(s["label"])}\n{escape(xlabels[i])}: {fmt(v)}</title></circle>')
    out.append("</svg>")
    if not legend:
        return "\n".join(out)
    # A line several configs share names them all on hover (``members``).
    items = "".join(f'<li{_members(s)}><span class="swatch" style="background:{PALETTE[k % len(PALETTE)]}"></span>'
                     f'{escape(s["label"])}</li>' for k, s in enumerate(series))
    return "\n".join(out) + f'\n<ul class="legend">{items}</ul>'


def _members(series: dict) -> str:
    names = series.get("members") or []
    return f' title="{escape(chr(10).join(names))}"' if len(names) > 1 else ""


def _shade(t: float) -> str:
    """White to dark blue; t in [0, 1]."""
    r, g, b = (int(255 + (c - 255) * t) for c in (8, 48, 107))
    return f"rgb({r},{g},{b})"


def heatmap(title: str, xs: list, ys: list, cells: dict, x_label: str, y_label: str, chart_id: str) -> str:
    """``cells``: (x, y) -> (value, note). Rows are ``ys`` (top to bottom), columns ``xs``."""
    vals = [v for v, _ in cells.values()]
    if not vals:
        return f'<p class="empty">{escape(title)}: no values</p>'
    lo, hi = min(vals), max(vals)
    cw, chh = 64, 34
    left, top = 70, 10
    w, h = left + cw * len(xs) + 10, top + chh * len(ys) + 44
    out = [f'<svg class="heatmap" id="{escape(chart_id)}" viewBox="0 0 {w} {h}" width="{w}" height="{h}" '
           f'role="img" aria-label="{escape(title)}" xmlns="http://www.w3.org/2000/svg">']
    for j, yv in enumerate(ys):
        out.append(f'<text x="{left - 6}" y="{top + chh * j + chh / 2 + 4}" text-anchor="end">{escape(str(yv))}</text>')
        for i, xv in enumerate(xs):
            cell = cells.get((xv, yv))
            cx, cy = left + cw * i, top + chh * j
            if cell is None:
                out.append(f'<rect x="{cx}" y="{cy}" width="{cw - 2}" height="{chh - 2}" class="nocell"/>')
                continue
            v, note = cell
            t = 0.15 + 0.85 * ((v - lo) / (hi - lo) if hi > lo else 0.5)
            ink = "#fff" if t > 0.55 else "#000"
            out.append(f'<rect x="{cx}" y="{cy}" width="{cw - 2}" height="{chh - 2}" fill="{_shade(t)}">'
                       f'<title>{escape(x_label)}={escape(str(xv))}, {escape(y_label)}={escape(str(yv))}: '
                       f'{fmt(v)}{escape(note)}</title></rect>'
                       f'<text x="{cx + cw / 2 - 1}" y="{cy + chh / 2 + 4}" text-anchor="middle" style="fill:{ink}">'
                       f'{fmt(v)}</text>')
    for i, xv in enumerate(xs):
        out.append(f'<text x="{left + cw * i + cw / 2 - 1}" y="{top + chh * len(ys) + 14}" text-anchor="middle">'
                   f'{escape(str(xv))}</text>')
    out.append(f'<text x="{left + cw * len(xs) / 2}" y="{h - 6}" text-anchor="middle">{escape(x_label)}</text>')
    out.append(f'<text x="12" y="{top + chh * len(ys) / 2}" transform="rotate(-90 12 {top + chh * len(ys) / 2})" '
               f'text-anchor="middle">{escape(y_label)}</text>')
    out.append("</svg>")
    return "\n".join(out)
