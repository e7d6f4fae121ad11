"""The model section of ``fedpriv report``'s page: a GAM's term importances and shape
functions in raw units with their noise bands, or a tree model's split usage.

Numeric shapes are drawn on the column's public scale (its transform's, where the
bins are equal or quantile cells), with tick labels in raw units; categorical and
binary terms as one bar per level. Importances come from
:class:`fedpriv.server.report.Report` (public rows) or, without public rows, the
shapes' spread, which reads no row.
"""

from __future__ import annotations

from html import escape

import numpy as np
from fedpriv.server import report_svg as svg


def _term_ticks(t) -> tuple[np.ndarray, list[tuple[float, str]]]:
    """Bin edges on the term's public scale (where the bins are equal or quantile cells)
    and tick labels in raw units."""
    edges = np.asarray(t.edges, dtype=np.float64)
    lo, hi = edges[0], edges[-1]
    f, inverse = {
        "log1p": (np.log1p, np.expm1),
        "sqrt": (np.sqrt, np.square),
    }.get(t.transform, (lambda x: x, lambda x: x))
    us = (f(edges) - f(lo)) / (f(hi) - f(lo))
    if t.transform == "identity":
        ticks = [((v - lo) / (hi - lo), svg.fmt(v)) for v in svg.nice_ticks(lo, hi)]
    else:  # evenly spaced on the public scale, labelled with the raw value there
        at = np.linspace(0.0, 1.0, 5)
        raw = inverse(f(lo) + at * (f(hi) - f(lo)))
        ticks = [(float(u), svg.fmt(float(v))) for u, v in zip(at, raw, strict=True)]
    return us, ticks


def model(r) -> str:
    e, art = r.explanation, r.artefact
    if art is None:
        return ""
    out = [f"<h2>The model ({escape(art.method)})</h2>"]
    if e is None:
        return out[0] + "<p>This method's model has no per-column explanation.</p>"
    if hasattr(e, "counts"):  # split usage
        rows = sorted(zip(e.columns, e.counts.tolist(), strict=True), key=lambda x: -x[1])
        out.append(
            f"<p>Internal nodes splitting on each column over {e.trees} trees: "
            f"{escape(e.note)}.</p>"
        )
        out.append(
            "<div class='panel'>"
            + svg.hbars(rows, label="split usage", x_label="internal nodes")
            + "</div>"
        )
        return "".join(out)
    terms = list(e.terms)
    imp = r.importance
    order = sorted(terms, key=lambda t: -(imp.get(t.name, t.spread) if imp else t.spread))
    if imp:
        rows = [(t.name, imp[t.name]) for t in order]
        out.append(
            "<h3>Term importance</h3><p>Left: the mean absolute centred contribution "
            "(logits) over the public evaluation rows, as EBM's term importance; right: "
            "the shape's spread (max − min over its bins), which reads no row. Never "
            "averaged over private rows (that would be a release).</p>"
        )
        out.append(
            "<div class='panel'>"
            + svg.hbars(
                rows,
                label="term importance",
                x_label="logits",
                second=[t.spread for t in order],
                titles=("mean |contribution| over public rows", "spread of the shape"),
            )
            + "</div>"
        )
    else:
        rows = [(t.name, t.spread) for t in order]
        out.append(
            "<h3>Term spread</h3><p>max − min of each shape (no public rows to "
            "average over).</p><div class='panel'>"
            + svg.hbars(rows, label="spread", x_label="logits")
            + "</div>"
        )
    out.append(f"<h3>Shape functions (intercept {svg.fmt(float(np.mean(e.intercept)))})</h3>")
    band = e.noise_rule or "no noise band: a non-private run, or events the bound does not cover"
    out.append(f"<p>Band / error bars: {escape(band)}.</p><div class='grid'>")
    for t in order:
        values = np.asarray(t.values, dtype=np.float64)
        if values.ndim > 1:
            values = values[:, 1] if values.shape[1] > 1 else values[:, 0]
        std = t.noise_std
        head = f"{t.name} · {t.kind}" + (
            f", {t.transform} scale" if t.transform != "identity" else ""
        )
        head += "" if t.visits is None else f" · updated in {t.visits} rounds"
        if t.kind == "numeric" and t.edges.size:
            n = t.edges.size - 1
            us, ticks = _term_ticks(t)
            miss = None if not t.missing else (values[n], 0.0 if std is None else std[n])
            plot = svg.step_band(
                us,
                values[:n],
                None if std is None else std[:n],
                xticks=ticks,
                missing=miss,
                x_label=f"{t.name} (raw units)",
                label=f"shape of {t.name}",
            )
        else:
            plot = svg.level_bars(
                list(t.labels), values, std, x_label=t.name, label=f"shape of {t.name}"
            )
        out.append(
            f"<div class='panel term' id='term-{escape(t.name)}'><h3>{escape(head)}</h3>"
            f"{plot}</div>"
        )
    out.append("</div>")
    if e.pairs:
        out.append(
            "<p>Interaction terms: "
            + ", ".join(escape(f"{a} × {b}") for a, b in e.pairs)
            + " (not drawn).</p>"
        )
    return "".join(out)
