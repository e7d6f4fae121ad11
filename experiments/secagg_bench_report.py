"""The secure-aggregation benchmark's report: a table per K, the parameters, the stops.

Written by :mod:`experiments.secagg_benchmark` as ``<out>.md`` and ``<out>.csv``.
"""

from __future__ import annotations

import csv
import platform
from collections.abc import Sequence
from pathlib import Path

import flwr
from fedpriv.experiments.secagg_benchmark import flower_params, parameters

COLUMNS = (
    "system", "K", "L", "dropout", "status", "survivors", "degree", "threshold",
    "setup_server_cpu_s", "setup_client_cpu_s", "round_server_cpu_s", "round_client_cpu_s",
    "setup_up_bytes", "setup_down_bytes", "round_up_bytes", "round_down_bytes",
    "max_abs_error", "tolerance", "process_cpu_s", "wall_s", "load_before", "load_after",
)  # fmt: skip


def _f(x, digits: int = 3) -> str:
    if x is None or x == "":
        return "–"
    if isinstance(x, float):
        return f"{x:.{digits}g}" if abs(x) < 1e4 else f"{x:,.0f}"
    return str(x)


def _kb(x) -> str:
    return "–" if x is None else f"{x / 1000:,.1f}"


def _per_round(row: dict) -> tuple[float | None, float | None]:
    """(server, client) CPU of one round in steady state: Flower re-keys every round
    (its setup stages are per round); fedpriv's keys are once per run."""
    if row.get("status") != "ok":
        return None, None
    server, client = row["round_server_cpu_s"], row["round_client_cpu_s"]
    if row["system"] == "flower":
        server, client = server + row["setup_server_cpu_s"], client + row["setup_client_cpu_s"]
    return server, client


def _table(rows: Sequence[dict]) -> list[str]:
    head = (
        "| L | drop | system | status | setup CPU server / client (s) | round CPU server / "
        "client (s) | per-round CPU server / client (s) | up per client setup / round (kB) "
        "| down per client setup / round (kB) | max abs error |"
    )
    out = [head, "|" + "---|" * 10]
    for r in rows:
        ok = r.get("status") == "ok"
        ps, pc = _per_round(r)
        cells = [
            f"{r['L']:,}", f"{r['dropout']:.0%}", r["system"], r["status"],
            f"{_f(r.get('setup_server_cpu_s'))} / {_f(r.get('setup_client_cpu_s'))}" if ok else "",
            f"{_f(r.get('round_server_cpu_s'))} / {_f(r.get('round_client_cpu_s'))}" if ok else "",
            f"{_f(ps)} / {_f(pc)}" if ok else "",
            f"{_kb(r.get('setup_up_bytes'))} / {_kb(r.get('round_up_bytes'))}" if ok else "",
            f"{_kb(r.get('setup_down_bytes'))} / {_kb(r.get('round_down_bytes'))}" if ok else "",
            _f(r.get("max_abs_error")) if ok else "",
        ]  # fmt: skip
        out.append("| " + " | ".join(cells) + " |")
    return out


def _comparison(rows: Sequence[dict]) -> list[str]:
    """fedpriv against Flower at every (K, L, dropout) where both ran."""
    idx = {(r["system"], r["K"], r["L"], r["dropout"]): r for r in rows}
    out = [
        "| K | L | drop | fedpriv per-round CPU server / client (s) | Flower per-round CPU "
        "server / client (s) | Flower ÷ fedpriv server / client | round upload per client "
        "fedpriv / Flower (kB) |",
        "|---|---|---|---|---|---|---|",
    ]
    for (s, k, n, d), r in idx.items():
        f = idx.get(("flower", k, n, d))
        if s != "fedpriv" or f is None or not r["status"] == f["status"] == "ok":
            continue
        (a, b), (c, e) = _per_round(r), _per_round(f)
        up_f = f["round_up_bytes"] + f["setup_up_bytes"]
        out.append(
            f"| {k} | {n:,} | {d:.0%} | {_f(a)} / {_f(b)} | {_f(c)} / {_f(e)} | "
            f"{_ratio(c, a)} / {_ratio(e, b)} | {_kb(r['round_up_bytes'])} / {_kb(up_f)} |"
        )
    return out


def _ratio(x: float, y: float) -> str:
    return f"{x / y:.2g}" if y > 0 else "–"


def _stops(rows: Sequence[dict]) -> list[str]:
    out = []
    for s in ("plain", "fedpriv", "flower"):
        mine = [r for r in rows if r["system"] == s]
        bad = [r for r in mine if r["status"] != "ok" and not r["status"].startswith("skipped")]
        if not mine:
            continue
        if not bad:
            out.append(f"- **{s}** ran every cell of the grid (none stopped).")
            continue
        first = ", ".join(f"K = {r['K']}, L = {r['L']:,}, dropout {r['dropout']:.0%} "
                          f"({r['status']})" for r in bad)  # fmt: skip
        skipped = sum(r["status"].startswith("skipped") for r in mine)
        done = [r for r in mine if r["status"] == "ok"]
        top = max(done, key=lambda r: (r["K"], r["L"])) if done else None
        reach = f"largest cell run: K = {top['K']}, L = {top['L']:,}" if top else "no cell ran"
        out.append(f"- **{s}** stops at {first}; {skipped} larger cells skipped; {reach}.")
    return out


def write_report(rows: Sequence[dict], meta: dict, out: Path) -> None:
    """``out``.csv (one row per cell) and ``out``.md (the tables and the stops)."""
    with out.with_suffix(".csv").open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=COLUMNS, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    ks = sorted({r["K"] for r in rows})
    md = [
        "# Secure aggregation: fedpriv's shim against the plain sum and Flower's SecAgg+",
        "",
        "`python -m fedpriv.experiments.secagg_benchmark` (module docstring: the method).",
        f"Flower {flwr.__version__}, Python {platform.python_version()}, "
        f"{meta['cpus']} CPUs shared with other jobs; load average (1, 5, 15 min) "
        f"{', '.join(f'{x:.2f}' for x in meta['load_start'])} at the start, "
        f"{', '.join(f'{x:.2f}' for x in meta['load_end'])} at the end; run "
        f"{meta['wall_s'] / 60:.1f} min wall. Limits per cell: {meta['limit']:g} s CPU "
        f"(a watchdog in the cell's own process), {meta['memory_gb']:g} GB address space, "
        f"{meta.get('wall', 3 * meta['limit']):g} s wall. Seed {meta['seed']}.",
        "",
        "## Where each stops",
        "",
        *_stops(rows),
        "",
        "## Parameters",
        "",
        "| K | fedpriv degree k / threshold t | Flower num_shares / reconstruction_threshold |",
        "|---|---|---|",
    ]
    for k in ks:
        d, t = parameters(k)
        p = flower_params(k)
        graph = f"{d} / {t}" if d is not None else f"complete ({k - 1}) / {t}"
        md.append(f"| {k} | {graph} | {p.num_shares} / {p.reconstruction_threshold} |")
    md += ["", *PARAMETERS.splitlines(), "", "## fedpriv against Flower", ""]
    md += [*_comparison(rows), "", *COMPARISON_NOTE.splitlines()]
    for k in ks:
        md += ["", f"## K = {k}", "", *_table([r for r in rows if r["K"] == k])]
    md += ["", *HOW_TO_READ.splitlines()]
    if meta.get("notes"):  # the run's own remarks (``<out>.meta.json``)
        md += ["", "## Notes", "", *meta["notes"]]
    out.with_suffix(".md").write_text("\n".join(md) + "\n")


PARAMETERS = """\
fedpriv: k and t from `SecAggConfig().graph_parameters(K)` (γ = δ = 0.1, σ = 40, η = 20;
`choose_parameters`, Bell et al. 2020), t raised to the neighbourhood's strict majority;
below the graph's range the complete graph with t = ⌊K/2⌋ + 1. Ring Z_{2^64}, fixed point
at scale 2^32 (`FixedPointCodec`, |x| ≤ 1): the sum is exact. Keys X25519 + Ed25519,
shares of a 305-bit self-mask seed in GF(2^61 − 1) sealed by ChaCha20-Poly1305, masks
ChaCha20 keystreams. Keys once per run; each round signs the survivor list. Each cell
measures one round, so each round's seeds are shared in that round (`SecAggConfig()`,
one round a batch: Flower's schedule too); runs share them up to 16 rounds at a time
(no more than the strategy's rounds left).

Flower: `SecAggPlusWorkflow(num_shares = k + 1, reconstruction_threshold = t,
max_weight = 1, clipping_range = 8, quantization_range = 2^22, modulus_range = 2^32)`:
Flower has no default for the two it requires, so they follow fedpriv's k and t (its
neighbourhoods count the node itself). Stochastic quantisation to 2^22 levels over
[−8, 8] (one step 3.8e-6), masks mod 2^32 from numpy's `RandomState` seeded by 32 bits,
ECDH on P-384, Fernet, Shamir in GF(2^128) (PyCryptodome). Every stage, keys included,
runs every round."""

COMPARISON_NOTE = """\
Per-round CPU: fedpriv's round alone (its keys are set up once per run); Flower's setup
and round stages together, since its workflow re-keys every round. Round upload:
fedpriv's masked input, signature and unmask answer; Flower's four replies."""

HOW_TO_READ = """\
## How to read the tables

- CPU: `time.process_time` around each call, charged to the side that ran it. Server:
  the `SecAggServer` calls (fedpriv) or each workflow stage minus the clients' handler
  calls and the transport (Flower). Client: the mean over the clients that answered.
- Setup: fedpriv's key generation, the key book and each client pinning it and deriving
  the graph (once per run); Flower's setup and share-keys stages (every round).
  Round: fedpriv's masked input, consistency and unmask; Flower's collect-masked-vectors
  and unmask stages.
- Bytes per client: Flower, the protobuf size of each message's RecordDict through
  Flower's serde (`recorddict_to_proto`, metadata excluded); fedpriv and plain, payload
  bytes (vectors at 8 B per coordinate, ciphertexts, keys, signatures at their length,
  ids at 8 B). Up: mean over the clients that answered; down: over every client sent to.
- Max abs error: against the plain float sum of the survivors' vectors; fedpriv's must
  be bit-identical to the plain ring sum (it is checked, 0 tolerance), Flower's within
  |S| quantisation steps, else the cell fails.
- Dropouts: ⌊0.1·K⌋ clients chosen by the seed, the same in both systems, take part in
  the key exchange and send no masked input."""
