"""Inline SVG charts for ``fedpriv report``: no script, no network, no plotting library.

Each function returns one ``<svg>`` element as text, sized in CSS pixels, with
axes, ticks and labels; hovering a mark shows its value (an SVG ``<title>``).
The page (:mod:`fedpriv.server.report_html`) embeds them as they are.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from html import escape

import numpy as np

W, H = 560, 260
LEFT, RIGHT, TOP, BOTTOM = 58, 14, 14, 44
INK, GRID, BAND = "#1f3b57", "#d9dee4", "#9cc3e6"
COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b")


def nice_ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    """About ``n`` round tick values covering [lo, hi]."""
    if not (math.isfinite(lo) and math.isfinite(hi)) or hi <= lo:
        return [lo]
    raw = (hi - lo) / max(n, 1)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    first = math.ceil(lo / step - 1e-9) * step
    return [round(first + i * step, 12) for i in range(int((hi - first) / step + 1e-9) + 1)]


def fmt(x: float) -> str:
    """A tick or value label: short, no needless zeros."""
    if not math.isfinite(x):
        return "∞" if x > 0 else "−∞"
    if x != 0 and (abs(x) >= 1e5 or abs(x) < 1e-3):
        return f"{x:.2g}"
    return f"{x:.4g}"


class Frame:
    """A plot area mapping data (x, y) ranges onto the SVG canvas."""

    def __init__(self, xlim, ylim, *, width=W, height=H, bottom=BOTTOM):
        self.x0, self.x1 = xlim
        self.y0, self.y1 = ylim
        if self.x1 <= self.x0:
            self.x1 = self.x0 + 1.0
        if self.y1 <= self.y0:
            self.y0, self.y1 = self.y0 - 0.5, self.y0 + 0.5
        self.w, self.h, self.bottom = width, height, bottom

    def x(self, v: float) -> float:
        return LEFT + (v - self.x0) / (self.x1 - self.x0) * (self.w - LEFT - RIGHT)

    def y(self, v: float) -> float:
        return (
            self.h
            - self.bottom
            - (v - self.y0) / (self.y1 - self.y0) * (self.h - TOP - self.bottom)
        )

    def axes(self, x_label: str, y_label: str, *, xticks=None, yticks=None) -> list[str]:
        """Grid lines, tick labels and axis titles; ``xticks``: ``[(value, label)]``."""
        out = []
        for v in yticks if yticks is not None else nice_ticks(self.y0, self.y1):
            if self.y0 - 1e-12 <= v <= self.y1 + 1e-12:
                y = self.y(v)
                out.append(
                    f'<line x1="{LEFT}" x2="{self.w - RIGHT}" y1="{y:.1f}" y2="{y:.1f}" '
                    f'stroke="{GRID}"/>'
                )
                out.append(
                    f'<text x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">{fmt(v)}</text>'
                )
        ticks = (
            xticks if xticks is not None else [(v, fmt(v)) for v in nice_ticks(self.x0, self.x1)]
        )
        base = self.h - self.bottom
        for v, label in ticks:
            if self.x0 - 1e-12 <= v <= self.x1 + 1e-12:
                x = self.x(v)
                out.append(
                    f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{base}" y2="{base + 4}" stroke="{INK}"/>'
                )
                out.append(
                    f'<text x="{x:.1f}" y="{base + 16}" text-anchor="middle">'
                    f"{escape(str(label))}</text>"
                )
        out.append(
            f'<line x1="{LEFT}" x2="{self.w - RIGHT}" y1="{base}" y2="{base}" stroke="{INK}"/>'
        )
        out.append(f'<line x1="{LEFT}" x2="{LEFT}" y1="{TOP}" y2="{base}" stroke="{INK}"/>')
        out.append(
            f'<text x="{(LEFT + self.w - RIGHT) / 2:.0f}" y="{self.h - 6}" '
            f'text-anchor="middle" class="axis">{escape(x_label)}</text>'
        )
        out.append(
            f'<text transform="translate(14 {(TOP + base) / 2:.0f}) rotate(-90)" '
            f'text-anchor="middle" class="axis">{escape(y_label)}</text>'
        )
        return out


def svg(parts: Sequence[str], *, width=W, height=H, label: str = "", cls: str = "") -> str:
    """One ``<svg>`` element around ``parts``."""
    klass = f' class="{cls}"' if cls else ""
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="{escape(label)}"{klass}>'
        + "".join(parts)
        + "</svg>"
    )


def _polyline(frame: Frame, xs, ys, colour: str, *, dash: str = "", width: float = 2) -> str:
    pts = " ".join(f"{frame.x(x):.1f},{frame.y(y):.1f}" for x, y in zip(xs, ys, strict=True))
    extra = f' stroke-dasharray="{dash}"' if dash else ""
    return f'<polyline points="{pts}" fill="none" stroke="{colour}" stroke-width="{width}"{extra}/>'


def _dot(frame: Frame, x: float, y: float, colour: str, tip: str, r: float = 3.5) -> str:
    return (
        f'<circle cx="{frame.x(x):.1f}" cy="{frame.y(y):.1f}" r="{r:.1f}" fill="{colour}">'
        f"<title>{escape(tip)}</title></circle>"
    )


def line_chart(
    series, *, x_label: str, y_label: str, label: str, hline=None, points=(), ylim=None
) -> str:
    """Lines ``[(name, xs, ys)]``; ``hline`` (value, text) a dashed reference line;
    ``points`` ``[(name, xs, ys)]`` drawn as dots."""
    xs = [x for _, sx, _ in [*series, *points] for x in sx]
    ys = [y for _, _, sy in [*series, *points] for y in sy]
    if hline is not None:
        ys.append(hline[0])
    y_lo, y_hi = ylim if ylim is not None else (0.0, max(ys, default=1.0) * 1.08 or 1.0)
    frame = Frame((min(xs, default=0), max(xs, default=1)), (y_lo, y_hi))
    parts = frame.axes(x_label, y_label)
    if hline is not None:
        y = frame.y(hline[0])
        parts.append(
            f'<line x1="{LEFT}" x2="{W - RIGHT}" y1="{y:.1f}" y2="{y:.1f}" '
            f'stroke="#888" stroke-dasharray="6 4"/>'
        )
        parts.append(
            f'<text x="{W - RIGHT - 4}" y="{y - 5:.1f}" text-anchor="end">{escape(hline[1])}</text>'
        )
    for i, (_, sx, sy) in enumerate(series):
        parts.append(_polyline(frame, sx, sy, COLOURS[i % len(COLOURS)]))
    for i, (name, sx, sy) in enumerate(points):
        colour = COLOURS[(i + len(series)) % len(COLOURS)]
        for x, y in zip(sx, sy, strict=True):
            parts.append(_dot(frame, x, y, colour, f"{name}: {fmt(x)}, {fmt(y)}"))
    parts += _legend([n for n, *_ in series] + [n for n, *_ in points])
    return svg(parts, label=label)


def _legend(names: list[str]) -> list[str]:
    """Bottom right, where the report's curves (rising, concave or near the diagonal) leave
    the plot empty."""
    out = []
    x = W - RIGHT - 12 - 7 * max((len(n) for n in names), default=0)
    for i, name in enumerate(names):
        y = H - BOTTOM - 10 - 16 * (len(names) - 1 - i)
        out.append(
            f'<rect x="{x - 18}" y="{y - 6}" width="12" height="4" '
            f'fill="{COLOURS[i % len(COLOURS)]}"/>'
        )
        out.append(f'<text x="{x}" y="{y}">{escape(name)}</text>')
    return out


def step_band(us, values, std, *, xticks, missing=None, x_label: str, label: str) -> str:
    """A numeric term's shape: a step over bin edges ``us`` (positions on the term's
    public scale), ``values`` one per bin, a shaded band ±``std``; ``missing``:
    (value, std) of the missing-value bin, drawn apart on the right."""
    values = np.asarray(values, dtype=np.float64)
    sd = np.zeros_like(values) if std is None else np.asarray(std, dtype=np.float64)
    lo = min(float((values - sd).min()), 0.0)
    hi = max(float((values + sd).max()), 0.0)
    if missing is not None:
        lo, hi = min(lo, missing[0] - missing[1]), max(hi, missing[0] + missing[1])
    pad = 0.08 * (hi - lo or 1.0)
    span = us[-1] - us[0]
    x_hi = us[-1] + (0.14 * span if missing is not None else 0.0)
    frame = Frame((us[0], x_hi), (lo - pad, hi + pad))
    parts = frame.axes(x_label, "logit contribution", xticks=xticks)
    zero = frame.y(0.0)
    parts.append(
        f'<line x1="{LEFT}" x2="{W - RIGHT}" y1="{zero:.1f}" y2="{zero:.1f}" '
        f'stroke="#555" stroke-width="0.8"/>'
    )
    bins = list(zip(us[:-1], us[1:], values, sd, strict=True))
    upper = [(u, v + s) for a, b, v, s in bins for u in (a, b)]
    lower = [(u, v - s) for a, b, v, s in bins for u in (a, b)]
    if std is not None:
        pts = " ".join(f"{frame.x(u):.1f},{frame.y(v):.1f}" for u, v in [*upper, *lower[::-1]])
        parts.append(
            f'<polygon points="{pts}" fill="{BAND}" opacity="0.55" class="band">'
            "<title>noise bound (± one standard deviation)</title></polygon>"
        )
    steps = [(u, v) for a, b, v, _ in bins for u in (a, b)]
    parts.append(
        _polyline(
            frame, [u for u, _ in steps], [v for _, v in steps], COLOURS[0], width=2.2
        ).replace("<polyline", '<polyline class="shape"')
    )
    for a, b, v, s in bins:
        parts.append(
            f'<rect x="{frame.x(a):.1f}" y="{TOP}" width="{frame.x(b) - frame.x(a):.1f}" '
            f'height="{H - TOP - BOTTOM}" fill="transparent"><title>{fmt(v)} ± {fmt(s)}'
            "</title></rect>"
        )
    if missing is not None:
        mx = us[-1] + 0.08 * span
        v, s = missing
        parts.append(_errorbar(frame, mx, v, s))
        parts.append(_dot(frame, mx, v, COLOURS[1], f"missing: {fmt(v)} ± {fmt(s)}", 4))
        parts.append(
            f'<text x="{frame.x(mx):.1f}" y="{H - BOTTOM + 16}" text-anchor="middle">missing</text>'
        )
    return svg(parts, label=label, cls="shape-plot")


def _errorbar(frame: Frame, x: float, v: float, s: float) -> str:
    if not s:
        return ""
    px = frame.x(x)
    return (
        f'<line x1="{px:.1f}" x2="{px:.1f}" y1="{frame.y(v - s):.1f}" y2="{frame.y(v + s):.1f}" '
        f'stroke="{INK}" stroke-width="1.4"/>'
    )


def level_bars(labels, values, std, *, x_label: str, label: str) -> str:
    """A categorical or binary term: one bar per level from 0, error bars ±``std``."""
    values = np.asarray(values, dtype=np.float64)
    sd = np.zeros_like(values) if std is None else np.asarray(std, dtype=np.float64)
    n = values.size
    lo, hi = min(float((values - sd).min()), 0.0), max(float((values + sd).max()), 0.0)
    pad = 0.08 * (hi - lo or 1.0)
    rotate = n > 6 or max((len(x) for x in labels), default=0) > 10
    bottom = 96 if rotate else BOTTOM
    height = H + (bottom - BOTTOM)
    frame = Frame((0, n), (lo - pad, hi + pad), height=height, bottom=bottom)
    parts = frame.axes(x_label, "logit contribution", xticks=[])
    zero = frame.y(0.0)
    bw = (frame.x(1) - frame.x(0)) * 0.7
    for i, (name, v, s) in enumerate(zip(labels, values, sd, strict=True)):
        cx = frame.x(i + 0.5)
        top, bot = sorted((frame.y(v), zero))
        parts.append(
            f'<rect x="{cx - bw / 2:.1f}" y="{top:.1f}" width="{bw:.1f}" '
            f'height="{max(bot - top, 0.5):.1f}" fill="{COLOURS[0]}" class="shape">'
            f"<title>{escape(name)}: {fmt(v)} ± {fmt(s)}</title></rect>"
        )
        parts.append(_errorbar(frame, i + 0.5, v, s))
        ty = height - bottom + 14
        text = escape(name if len(name) <= 18 else name[:17] + "…")
        if rotate:
            parts.append(
                f'<text transform="translate({cx:.1f} {ty}) rotate(-40)" '
                f'text-anchor="end">{text}</text>'
            )
        else:
            parts.append(f'<text x="{cx:.1f}" y="{ty}" text-anchor="middle">{text}</text>')
    return svg(parts, height=height, label=label, cls="shape-plot")


def hbars(rows, *, label: str, x_label: str, second=None, titles=("", "")) -> str:
    """Horizontal bars ``[(name, value)]`` (sorted by the caller); ``second``: a second
    measure per row drawn in its own column on its own scale, ``titles`` heading each."""
    n = len(rows)
    left, top_pad = 170, TOP + (18 if second is not None else 0)
    width = W if second is None else 860
    height = top_pad + 22 * n + BOTTOM
    columns = [([v for _, v in rows], left, (width if second is None else 520) - 90)]
    if second is not None:
        columns.append((list(second), 540, width - RIGHT - 90))
    parts = []
    for i, (name, _) in enumerate(rows):
        y = top_pad + 22 * i
        parts.append(f'<text x="{left - 6}" y="{y + 13}" text-anchor="end">{escape(name)}</text>')
    for c, (values, x0, x1) in enumerate(columns):
        scale = (x1 - x0) / (max(values, default=1.0) or 1.0)
        colour = COLOURS[0] if c == 0 else COLOURS[4]
        if titles[c]:
            parts.append(f'<text x="{x0}" y="{TOP + 4}" class="axis">{escape(titles[c])}</text>')
        for i, ((name, _), v) in enumerate(zip(rows, values, strict=True)):
            y = top_pad + 22 * i
            parts.append(
                f'<rect x="{x0}" y="{y + 2}" width="{max(v * scale, 0.5):.1f}" height="12" '
                f'fill="{colour}"><title>{escape(name)}: {fmt(v)}</title></rect>'
            )
            parts.append(f'<text x="{x0 + v * scale + 4:.1f}" y="{y + 12}">{fmt(v)}</text>')
    parts.append(f'<text x="{left}" y="{height - 10}" class="axis">{escape(x_label)}</text>')
    return svg(parts, width=width, height=height, label=label)


def round_bars(rounds, *, label: str) -> str:
    """Asked (outline) and replying (filled) nodes per round; aborted rounds in red."""
    xs = [r["round"] for r in rounds]
    top = max((r["asked"] for r in rounds), default=1) or 1
    frame = Frame((min(xs, default=1) - 0.5, max(xs, default=1) + 0.5), (0, top * 1.1))
    yticks = [v for v in nice_ticks(0, top) if float(v).is_integer()]
    parts = frame.axes("round", "nodes", yticks=yticks)
    bw = max((frame.x(1) - frame.x(0)) * 0.8, 1.0)
    for r in rounds:
        x = frame.x(r["round"]) - bw / 2
        colour = COLOURS[1] if r["aborted"] else COLOURS[2]
        tip = f"round {r['round']}: {r['replies']}/{r['asked']} replied"
        if r.get("dropped"):
            tip += f", dropped {r['dropped']}"
        if r["aborted"]:
            tip += ", aborted"
        parts.append(
            f'<rect x="{x:.1f}" y="{frame.y(r["asked"]):.1f}" width="{bw:.1f}" '
            f'height="{frame.y(0) - frame.y(r["asked"]):.1f}" fill="none" '
            f'stroke="{GRID}"/>'
        )
        parts.append(
            f'<rect x="{x:.1f}" y="{frame.y(r["replies"]):.1f}" width="{bw:.1f}" '
            f'height="{frame.y(0) - frame.y(r["replies"]):.1f}" fill="{colour}">'
            f"<title>{escape(tip)}</title></rect>"
        )
    return svg(parts, label=label)
