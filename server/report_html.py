"""The page of ``fedpriv report``: one self-contained HTML file (inline CSS and SVG, no
script, nothing fetched), from a :class:`fedpriv.server.report.Report`."""

from __future__ import annotations

import json
import math
import re
from collections import OrderedDict
from datetime import UTC, datetime
from html import escape
from typing import Any

from fedpriv.server import report_svg as svg
from fedpriv.server.report_model import model
from fedpriv.server.run_files import as_float

PROVENANCE = (
    "Every number on this page is a released value (the model's parameters, the privacy "
    "ledger's events and their accounting, counts of who was asked and who replied) or is "
    "computed from public rows only (the public evaluation rows named in the Metrics "
    "section, the same rows the server scores). No node's private rows were read to make "
    "it, and importances are never averaged over private rows."
)

CSS = """
body{font:14px/1.45 system-ui,-apple-system,'Segoe UI',sans-serif;color:#1c2530;margin:0;
background:#f4f6f8}
main{max-width:1180px;margin:0 auto;padding:18px 24px 40px}
h1{font-size:22px;margin:6px 0 2px}h2{font-size:18px;margin:28px 0 8px;border-bottom:1px solid
#cfd6dd;padding-bottom:4px}h3{font-size:15px;margin:14px 0 4px}
.sub{color:#4b5966}.note{background:#fff8e1;border-left:4px solid #f0b400;padding:6px 10px;
margin:6px 0}.prov{background:#e8f1fb;border-left:4px solid #1f77b4;padding:8px 12px}
.badge{display:inline-block;padding:2px 10px;border-radius:10px;color:#fff;font-weight:600}
.completed{background:#2ca02c}.degraded{background:#e08a00}.failed{background:#d62728}
.running{background:#1f77b4}.unknown{background:#777}
.cards{display:flex;flex-wrap:wrap;gap:12px;margin:12px 0}.card{background:#fff;border:1px solid
#dde3e9;border-radius:6px;padding:10px 14px;min-width:150px}.card b{display:block;font-size:20px}
table{border-collapse:collapse;background:#fff;margin:6px 0}td,th{border:1px solid #dde3e9;
padding:3px 8px;text-align:left;vertical-align:top}th{background:#eef2f5}
.num{text-align:right;font-variant-numeric:tabular-nums}
.grid{display:flex;flex-wrap:wrap;gap:14px}.panel{background:#fff;border:1px solid #dde3e9;
border-radius:6px;padding:8px 10px}
.bar{width:420px;height:16px;background:#e3e8ed;border-radius:8px;overflow:hidden;display:inline-block;
vertical-align:middle}.bar span{display:block;height:100%;background:#1f77b4}
svg text{font:11px system-ui,sans-serif;fill:#1c2530}svg text.axis{font-size:12px;fill:#4b5966}
details{margin:6px 0}summary{cursor:pointer;color:#1f3b57}code{font-size:12px}
"""


def _fmt(x: Any, digits: int = 4) -> str:
    f = as_float(x)
    if f is None:
        return escape(str(x))
    if math.isinf(f):
        return "∞"
    return f"{f:.{digits}g}"


def _table(rows, head=None, *, num=()) -> str:
    out = ["<table>"]
    if head:
        out.append("<tr>" + "".join(f"<th>{escape(h)}</th>" for h in head) + "</tr>")
    for row in rows:
        cells = []
        for i, c in enumerate(row):
            cls = ' class="num"' if i in num else ""
            cells.append(f"<td{cls}>{c}</td>")
        out.append("<tr>" + "".join(cells) + "</tr>")
    return "".join(out) + "</table>"


def _kv(d: dict[str, Any]) -> str:
    return _table([(escape(str(k)), escape(_value(v))) for k, v in d.items()], ("key", "value"))


def _value(v: Any) -> str:
    return json.dumps(v, ensure_ascii=False) if isinstance(v, dict | list) else str(v)


# -- sections ----------------------------------------------------------------------
def header(r) -> str:
    state = r.run.state
    now = datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    out = [
        f"<h1>fedpriv run report</h1><div class='sub'>{escape(r.title)} · "
        f"<span class='badge {escape(state)}'>{escape(state)}</span> · "
        f"{escape(r.run.kind)} run · folder <code>{escape(str(r.run.path))}</code></div>"
    ]
    if r.run.running:
        out.append(
            f"<p class='note'>This run is <b>running</b>: the page shows its folder as "
            f"it was at {now}. Regenerate it (<code>fedpriv report</code>) to see more "
            "rounds; the model, metrics and status appear when the run ends.</p>"
        )
    else:
        out.append(f"<p class='sub'>Generated {now}.</p>")
    status = r.run.status or {}
    if status.get("reason"):
        out.append(f"<p>{escape(state)}: {escape(str(status['reason']))}</p>")
    out.append(f"<p class='prov'>{escape(PROVENANCE)}</p>")
    out += [f"<p class='note'>{escape(n)}</p>" for n in r.notes]
    return "".join(out)


def summary(r) -> str:
    p = r.run.privacy or {}
    budget = (p.get("budget") or {}).get("epsilon")
    cards = [("status", escape(r.run.state))]
    spent = _fmt(p.get("epsilon"), 5)
    cards.append(("ε spent", f"{spent} <small>of {_fmt(budget)}</small>"))
    if r.per_round:
        released = sum(1 for x in r.per_round if not x["aborted"])
        planned = r.run.rounds_planned
        cards.append(("rounds released", f"{released} <small>of {planned or '?'}</small>"))
    if r.scored is not None:
        cards.append(("test AUC (public rows)", f"{r.scored.auc:.4f}"))
    return (
        "<div class='cards'>"
        + "".join(f"<div class='card'>{escape(k)}<b>{v}</b></div>" for k, v in cards)
        + "</div>"
    )


def _event_text(spec: Any) -> str:
    """A serialised DpEvent as its repr-like text (nested events too), not yet escaped."""
    if isinstance(spec, list):
        return "[" + ", ".join(_event_text(x) for x in spec) + "]"
    if not isinstance(spec, dict):
        f = as_float(spec)
        return str(spec) if f is None else f"{f:.4g}"
    kind = str(spec.get("type", "?")).rsplit(".", 1)[-1]
    params = ", ".join(f"{k}={_event_text(v)}" for k, v in spec.items() if k != "type")
    return f"{kind}({params})"


def privacy(r) -> str:
    p = r.run.privacy
    if not p:
        return "<h2>Privacy</h2><p>No privacy report (privacy.json) in this folder.</p>"
    eps, budget = as_float(p.get("epsilon")), as_float((p.get("budget") or {}).get("epsilon"))
    out = ["<h2>Privacy card</h2>"]
    if eps is not None and budget and math.isfinite(budget) and math.isfinite(eps):
        share = min(eps / budget, 1.0)
        out.append(
            f"<p>Budget used: <span class='bar' title='{eps:.4g} of {budget:.4g}'>"
            f"<span style='width:{100 * share:.1f}%'></span></span> "
            f"{100 * eps / budget:.1f}% of ε = {budget:g}</p>"
        )
    certified = p.get("certified")
    cert = "yes" if certified else "no" if certified is not None else "?"
    rows = [
        ("ε (PLD accountant, primary)", _fmt(p.get("epsilon_pld"), 6)),
        ("ε (RDP accountant, cross-check)", _fmt(p.get("epsilon_rdp"), 6)),
        ("ε stated (the smaller bound)", _fmt(p.get("epsilon"), 6)),
        ("binding accountant", escape(str(p.get("binding_accountant", "?")))),
        ("δ", _fmt(p.get("delta"))),
        ("budget (ε, δ)", f"({_fmt(budget)}, {_fmt((p.get('budget') or {}).get('delta'))})"),
        ("neighbouring relation", escape(str(p.get("neighbouring_relation", "?")))),
        ("noise", escape(str(p.get("noise", "?")))),
        ("certified", f"<b>{cert}</b>"),
        ("journal", "complete" if p.get("complete", True) else "in progress (running run)"),
    ]
    card = getattr(r.artefact, "card", None)
    reasons = list(card.caveats) if card is not None else []
    if p.get("caveat") and p["caveat"] not in reasons:
        reasons.append(str(p["caveat"]))
    rows.append(
        (
            "caveats (why not certified)" if certified is False else "caveats",
            "<br>".join(escape(c) for c in reasons) or "none",
        )
    )
    out.append(_table(rows))
    events = p.get("events") or []
    groups: OrderedDict[tuple[str, str], int] = OrderedDict()

    def named(m: re.Match) -> str:  # "term 4" -> "term 4 (its column)"
        name = r.term_names.get(int(m[1]))
        return m[0] if name is None else f"term {m[1]} ({name})"

    for e in events:
        label = re.sub(r"^round \d+: ", "", str(e.get("label", "")))
        label = re.sub(r"\bterm (\d+)\b", named, label)
        key = (label, _event_text(e.get("event") or {}))
        groups[key] = groups.get(key, 0) + 1
    out.append(f"<h3>Releases ({len(events)} events, grouped)</h3>")
    out.append(
        _table(
            [(escape(k[0]), f"<code>{escape(k[1])}</code>", str(n)) for k, n in groups.items()],
            ("release", "DP event", "count"),
            num=(2,),
        )
    )
    listing = _table(
        [
            (
                str(e.get("index")),
                escape(str(e.get("label", ""))),
                f"<code>{escape(_event_text(e.get('event') or {}))}</code>",
            )
            for e in events
        ],
        ("#", "label", "event"),
    )
    out.append(f"<details><summary>every event, in release order</summary>{listing}</details>")
    if card is not None:
        extra = {
            "trust model": card.trust_model,
            "participation": card.participation,
            "public values": card.public_values,
        }
        out.append(
            "<details><summary>trust model, participation and public values (from the "
            f"model file's card)</summary>{_kv(extra)}</details>"
        )
    return "".join(out)


def epsilon(r) -> str:
    if not r.epsilon_curve:
        return ""
    xs, ys = zip(*r.epsilon_curve, strict=True)
    points = []
    logged = [
        (int(k), m["epsilon_upper_bound"])
        for k, m in (r.run.rounds or {}).items()
        if str(k).isdigit() and isinstance(m, dict) and "epsilon_upper_bound" in m
    ]
    logged += [
        (x["round"], x["epsilon_upper_bound"])
        for x in r.run.progress
        if x.get("epsilon_upper_bound") is not None and not r.run.rounds
    ]
    if logged:
        lx, ly = zip(*sorted(logged), strict=True)
        points.append(("bound logged by the server", lx, ly))
    budget = as_float(((r.run.privacy or {}).get("budget") or {}).get("epsilon"))
    hline = (budget, f"budget ε = {budget:g}") if budget and math.isfinite(budget) else None
    chart = svg.line_chart(
        [("ε re-accounted from the journal", xs, ys)],
        points=points,
        x_label="round",
        y_label="ε spent (upper bound)",
        label="epsilon per round",
        hline=hline,
    )
    return (
        "<h2>ε spent per round</h2><div class='panel'>" + chart + "</div><p class='sub'>"
        "Each point composes the releases of rounds 1..r (the ledger's own events) with "
        "the PLD accountant at the journal's discretisation and the RDP accountant, and "
        "keeps the smaller: an upper bound on ε at the run's δ.</p>"
    )


def participation(r) -> str:
    out = ["<h2>Participation and dropouts</h2>"]
    if r.per_round:
        out.append("<div class='panel'>" + svg.round_bars(r.per_round, label="replies") + "</div>")
        dropped = [x for x in r.per_round if x["replies"] < x["asked"] or x["aborted"]]
        out.append(f"<p>{len(r.per_round)} rounds; {len(dropped)} with a dropout or aborted.</p>")
    else:
        out.append(
            "<p>No per-round record (rounds.json or progress.jsonl) in this folder"
            + (": an in-process fit." if r.run.kind == "in-process" else ".")
            + "</p>"
        )
    if r.per_node:
        rows = [
            (f"node {p}", str(v["asked"]), str(v["replied"]), str(v["dropped"]))
            for p, v in sorted(r.per_node.items())
        ]
        out.append(_table(rows, ("partition", "rounds asked", "replied", "dropped"), num=(1, 2, 3)))
    comm = r.run.communication
    if comm:
        keep = (
            "floats_uploaded_per_client",
            "bytes_uploaded_per_client",
            "round_trips",
            "rounds",
            "rounds_released",
            "rounds_aborted",
            "rounds_discarded",
            "dropout_recoveries",
            "client_errors",
            "rejected_replies",
        )
        out.append("<h3>Communication (communication.json)</h3>")
        out.append(_kv({k: comm[k] for k in keep if k in comm}))
    return "".join(out)


def metrics(r) -> str:
    out = ["<h2>Metrics</h2>"]
    m = r.run.metrics
    if m:
        flat = {k: v for k, v in m.items() if not isinstance(v, dict)}
        out.append(_kv(flat))
        if isinstance(m.get("dp_federated"), dict):
            out.append("<h3>DP federated evaluation</h3>" + _kv(m["dp_federated"]))
    elif r.run.kind == "in-process":
        run = (r.run.privacy or {}).get("run") or {}
        out.append(_kv({k: run[k] for k in ("auc", "brier", "brier_base", "source") if k in run}))
    s = r.scored
    if s is None:
        return "".join(out)
    fpr, tpr = s.roc
    roc = svg.line_chart(
        [("ROC", fpr, tpr), ("chance", [0, 1], [0, 1])],
        x_label="false positive rate",
        y_label="true positive rate",
        label="ROC curve",
        ylim=(0, 1),
    )
    px, py, _n = zip(*s.calibration, strict=True)
    cal = svg.line_chart(
        [("observed", px, py), ("perfect", [0, 1], [0, 1])],
        points=[("bins of public rows", px, py)],
        x_label="mean predicted probability",
        y_label="observed positive rate",
        label="reliability diagram",
        ylim=(0, 1),
    )
    out.append(f"<h3>On public rows: {escape(s.source)} ({s.n} rows), AUC {s.auc:.4f}</h3>")
    out.append(
        f"<div class='grid'><div class='panel'>{roc}</div><div class='panel'>{cal}</div></div>"
    )
    rows = [(f"{a:.3f}", f"{b:.3f}", str(c)) for a, b, c in s.calibration]
    out.append(
        "<details><summary>reliability bins</summary>"
        + _table(rows, ("mean predicted", "observed rate", "rows"), num=(0, 1, 2))
        + "</details>"
    )
    return "".join(out)


def settings(r) -> str:
    c = r.run.config
    if not c:
        return ""
    return (
        "<h2>Settings</h2><details open><summary>run configuration</summary>"
        + _kv(c)
        + ("</details>")
    )


def render(r) -> str:
    """The whole page."""
    body = "".join(
        (
            header(r),
            summary(r),
            privacy(r),
            epsilon(r),
            participation(r),
            metrics(r),
            model(r),
            settings(r),
        )
    )
    return (
        f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
        f"<meta name='viewport' content='width=device-width, initial-scale=1'>"
        f"<title>fedpriv report: {escape(r.title)}</title><style>{CSS}</style></head>"
        f"<body><main>{body}<p class='sub'>fedpriv report · {escape(PROVENANCE)}</p>"
        "</main></body></html>\n"
    )
