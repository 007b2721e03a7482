"""Charts as inline SVG, drawn on the server: no script, no assets from anywhere.

Each function takes plain numbers and returns SVG markup (``markupsafe.Markup``, every
text escaped) that a template drops into the page. Bars and points carry a ``<title>``,
which browsers show as a tooltip.
"""

from __future__ import annotations

from datetime import datetime
from collections.abc import Sequence

from markupsafe import Markup, escape

#: One colour per memory table, in the legend's order.
PALETTE = ("#3b6fd8", "#e0803a", "#3aa570", "#b4509c", "#8d6e4e", "#5aaec2", "#c9b43a", "#777777")
STATUS_COLOUR = {"ok": "#3aa570", "warning": "#e0a53a", "critical": "#d64545"}


def _nice_max(value: float) -> float:
    """A round axis maximum at or above ``value``."""
    if value <= 0:
        return 1.0
    step = 1.0
    while step * 10 <= value:
        step *= 10
    for m in (1, 2, 2.5, 5, 10):
        if m * step >= value:
            return m * step
    return 10 * step


def _fmt(value: float) -> str:
    if value >= 1_000_000:
        return f"{value / 1_000_000:g}M"
    if value >= 1_000:
        return f"{value / 1_000:g}k"
    return f"{value:g}"


def stacked_bars(days: Sequence[datetime], series: dict[str, Sequence[int]], *, width: int = 720,
                 height: int = 220, title: str = "") -> Markup:
    """Rows added per day, one stacked bar per day, one colour per table."""
    if not days:
        return Markup('<p class="muted">no rows yet</p>')
    left, bottom, top = 48, 36, 12
    plot_w, plot_h = width - left - 8, height - bottom - top
    totals = [sum(s[i] for s in series.values()) for i in range(len(days))]
    ymax = _nice_max(max(totals))
    bar_w = plot_w / len(days)
    parts = [f'<svg class="chart" role="img" viewBox="0 0 {width} {height + 22 * ((len(series) + 3) // 4)}"'
             f' width="100%" aria-label="{escape(title)}">']
    for frac in (0, 0.5, 1):
        y = top + plot_h * (1 - frac)
        parts.append(f'<line x1="{left}" x2="{width - 8}" y1="{y:.1f}" y2="{y:.1f}" class="grid"/>'
                     f'<text x="{left - 4}" y="{y + 4:.1f}" text-anchor="end">{_fmt(ymax * frac)}</text>')
    for i, day in enumerate(days):
        y = top + plot_h
        for j, (name, values) in enumerate(series.items()):
            n = values[i]
            if not n:
                continue
            h = plot_h * n / ymax
            y -= h
            parts.append(f'<rect x="{left + i * bar_w + 1:.1f}" y="{y:.1f}" width="{max(bar_w - 2, 1):.1f}"'
                         f' height="{h:.1f}" fill="{PALETTE[j % len(PALETTE)]}">'
                         f'<title>{escape(name)} {day:%Y-%m-%d}: {n:,} rows</title></rect>')
    step = max(1, len(days) // 8)
    for i in range(0, len(days), step):
        parts.append(f'<text x="{left + (i + 0.5) * bar_w:.1f}" y="{top + plot_h + 16}" text-anchor="middle">'
                     f'{days[i]:%m-%d}</text>')
    for j, name in enumerate(series):
        x, y = left + (j % 4) * 170, height + 4 + 22 * (j // 4)
        parts.append(f'<rect x="{x}" y="{y}" width="12" height="12" fill="{PALETTE[j % len(PALETTE)]}"/>'
                     f'<text x="{x + 16}" y="{y + 11}">{escape(name)}</text>')
    parts.append("</svg>")
    return Markup("".join(parts))


def hbars(labels: Sequence[str], values: Sequence[int], captions: Sequence[str], *, width: int = 720) -> Markup:
    """Horizontal bars (table sizes), each labelled and captioned."""
    if not labels:
        return Markup('<p class="muted">no tables</p>')
    row, left = 22, 190
    vmax = max(max(values), 1)
    height = row * len(labels) + 4
    parts = [f'<svg class="chart" role="img" viewBox="0 0 {width} {height}" width="100%" aria-label="table sizes">']
    for i, (label, value, caption) in enumerate(zip(labels, values, captions, strict=False)):
        y = i * row + 2
        w = (width - left - 120) * value / vmax
        parts.append(f'<text x="{left - 6}" y="{y + 14}" text-anchor="end">{escape(label)}</text>'
                     f'<rect x="{left}" y="{y + 3}" width="{max(w, 1):.1f}" height="{row - 8}" fill="{PALETTE[0]}">'
                     f'<title>{escape(label)}: {escape(caption)}</title></rect>'
                     f'<text x="{left + w + 6:.1f}" y="{y + 14}">{escape(caption)}</text>')
    parts.append("</svg>")
    return Markup("".join(parts))


def usage_line(points: Sequence[tuple[int, float, str, str]], *, warning: float, critical: float,
               markers: Sequence[tuple[int, str]] = (), width: int = 720, height: int = 260) -> Markup:
    """Context usage (percent of the usable budget) per turn, with the thresholds and consolidations.

    ``points``: (turn, percent, status, tooltip); ``markers``: (turn, tooltip) of consolidations.
    """
    if not points:
        return Markup('<p class="muted">no user turns in this thread</p>')
    left, bottom, top, right = 48, 30, 12, 30
    plot_w, plot_h = width - left - right, height - bottom - top
    last_turn = max(p[0] for p in points)
    ymax = _nice_max(max(max(p[1] for p in points), critical * 100 * 1.1))

    def x(turn: float) -> float:
        return left + plot_w * ((turn - 1) / max(last_turn - 1, 1))

    def y(percent: float) -> float:
        return top + plot_h * (1 - percent / ymax)

    parts = [f'<svg class="chart" role="img" viewBox="0 0 {width} {height}" width="100%"'
             ' aria-label="context usage per turn">']
    for frac in (0, 0.5, 1):
        v = ymax * frac
        parts.append(f'<line x1="{left}" x2="{width - right}" y1="{y(v):.1f}" y2="{y(v):.1f}" class="grid"/>'
                     f'<text x="{left - 4}" y="{y(v) + 4:.1f}" text-anchor="end">{v:g}%</text>')
    for name, level in (("warning", warning), ("critical", critical)):
        parts.append(f'<line x1="{left}" x2="{width - right}" y1="{y(level * 100):.1f}" y2="{y(level * 100):.1f}"'
                     f' stroke="{STATUS_COLOUR[name]}" stroke-dasharray="5 4"><title>{name} at {level:.0%}</title>'
                     '</line>')
    for turn, tip in markers:
        parts.append(f'<line class="consolidation" x1="{x(turn):.1f}" x2="{x(turn):.1f}" y1="{top}"'
                     f' y2="{top + plot_h}" stroke="#888" stroke-width="1.5"><title>{escape(tip)}</title></line>')
    path = " ".join(f"{'M' if i == 0 else 'L'}{x(p[0]):.1f},{y(p[1]):.1f}" for i, p in enumerate(points))
    parts.append(f'<path d="{path}" fill="none" stroke="#3b6fd8" stroke-width="1.5"/>')
    for turn, percent, status, tip in points:
        parts.append(f'<circle class="point {escape(status)}" cx="{x(turn):.1f}" cy="{y(percent):.1f}" r="3"'
                     f' fill="{STATUS_COLOUR.get(status, "#3b6fd8")}"><title>{escape(tip)}</title></circle>')
    step = max(1, last_turn // 8)
    for turn in range(1, last_turn + 1, step):
        parts.append(f'<text x="{x(turn):.1f}" y="{top + plot_h + 16}" text-anchor="middle">{turn}</text>')
    parts.append("</svg>")
    return Markup("".join(parts))
