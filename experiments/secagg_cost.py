"""Secure aggregation's CPU cost against plain sums, fit for fit, in one process.

Each case fits one learner twice on the same rows with the same secret key: with
plain fixed-point sums (``secure_aggregation=False``) and through the shim (SecAgg+
over a random Harary graph once K is large enough, Bell et al. CCS 2020; Bonawitz et
al. 2017's complete graph below). It reports CPU seconds (``time.process_time``, the
whole ``fit`` in this process, every client and the server alike), the minimum over
``--repeats`` alternating fits after one warm-up fit of each (calibration caches,
imports), the ratio secure / plain, the key set-up's CPU (the engine's
``setup_keys``: key pairs, the key book, X25519 agreements and pair-key HKDFs) and
the per-round overhead (secure − plain − set-up) / rounds.

Cases: ``a`` boosting on Adult, K = 100 (10 rounds, depth 4, ε 2); ``b`` the same at
K = 1,000; ``c-gam`` and ``c-logistic``: DP-GAM and DP-SGD logistic regression at
their defaults on the synthetic task (4,800 × 15), K = 5; ``d`` DP-SGD logistic at
the paper's settings (800 steps, q 0.02, lr 2, C 3) on the synthetic task, K = 5.

``--profile CASE`` prints cProfile's top functions of one secure fit; ``--floor`` times
the cryptography a round cannot avoid (:mod:`fedpriv.experiments.secagg_floor`).

Usage::

    python -m fedpriv.experiments.secagg_cost                # every case, 3 repeats
    python -m fedpriv.experiments.secagg_cost --cases a d --repeats 3 --json out.json
    python -m fedpriv.experiments.secagg_cost --profile a
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import logging
import os
import pstats
import secrets
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger("fedpriv.experiments.secagg_cost")


@dataclass(frozen=True, kw_only=True)
class Case:
    """One learner, corpus and client count; ``params`` go to its estimator."""

    name: str
    learner: str
    dataset: str
    clients: int
    params: dict = field(default_factory=dict)
    target: float | None = None  # the ratio secure / plain to reach, if any
    round_target: float | None = None  # or the overhead per round (CPU s) to reach
    fit_target: float | None = None  # or a secure fit's CPU seconds to reach
    words: int = 32  # a round's reply length (uint64 words), for its cryptographic floor


CASES = {
    "a": Case(name="a", learner="boosting", dataset="adult", clients=100,
              params={"rounds": 10, "depth": 4}, target=1.5),
    "b": Case(name="b", learner="boosting", dataset="adult", clients=1000,
              params={"rounds": 10, "depth": 4}, round_target=1.0),
    "c-gam": Case(name="c-gam", learner="dp_gam", dataset="synthetic", clients=5, target=1.3,
                  words=16),
    "c-logistic": Case(name="c-logistic", learner="logistic", dataset="synthetic", clients=5,
                       target=1.3, words=16),
    "d": Case(name="d", learner="logistic", dataset="synthetic", clients=5,
              params={"rounds": 800, "sampling_rate": 0.02, "learning_rate": 2.0,
                      "clip_norm": 3.0}, fit_target=0.17, words=16),
}  # fmt: skip


class SetupClock:
    """CPU seconds inside :meth:`RoundEngine.setup_keys` (the run's key exchange)."""

    def __init__(self) -> None:
        self.seconds = 0.0

    def __enter__(self) -> SetupClock:
        from fedpriv.federation.engine import RoundEngine

        self._saved = RoundEngine.setup_keys
        original = self._saved

        def timed(engine) -> None:
            t0 = time.process_time()
            try:
                original(engine)
            finally:
                self.seconds += time.process_time() - t0

        RoundEngine.setup_keys = timed
        return self

    def __exit__(self, *exc) -> None:
        from fedpriv.federation.engine import RoundEngine

        RoundEngine.setup_keys = self._saved


def _data(name: str):
    from fedpriv.data import load_adult, load_synthetic

    return load_adult() if name == "adult" else load_synthetic()


def fit_once(case: Case, *, secure: bool, data, key) -> dict:
    """One fit's CPU seconds, its key set-up's, and its rounds."""
    from fedpriv.methods import get_method

    clf = get_method(case.learner).estimator_class(
        **case.params, epsilon=2.0, seed=0, num_clients=case.clients,
        secure_aggregation=secure, secret_key=key,
    )  # fmt: skip
    with SetupClock() as setup:
        t0 = time.process_time()
        clf.fit(data, part="train")
        cpu = time.process_time() - t0
    comm = clf.communication_
    return {"cpu": cpu, "setup": setup.seconds, "rounds": int(comm.rounds)}


def measure(case: Case, repeats: int, *, warm_secure: bool = True) -> dict:
    """Warm-up, then ``repeats`` alternating plain and secure fits; minima."""
    from fedpriv.experiments.keys import secret_key_for

    data = _data(case.dataset)
    key = secret_key_for("secagg-cost", case.name)  # every fit: the same draws in both modes
    fit_once(case, secure=False, data=data, key=key)
    if warm_secure:
        fit_once(case, secure=True, data=data, key=key)
    plain, secure = [], []
    for _ in range(repeats):
        plain.append(fit_once(case, secure=False, data=data, key=key))
        secure.append(fit_once(case, secure=True, data=data, key=key))
    p = min(x["cpu"] for x in plain)
    best = min(secure, key=lambda x: x["cpu"])
    s, setup, rounds = best["cpu"], best["setup"], best["rounds"]
    return {
        "case": case.name, "learner": case.learner, "dataset": case.dataset,
        "clients": case.clients, "rounds": rounds, "plain_cpu": p, "secure_cpu": s,
        "ratio": s / p, "setup_cpu": setup, "per_round_overhead": (s - p - setup) / rounds,
        "target_ratio": case.target, "load": Path("/proc/loadavg").read_text().split()[:3],
        "plain_all": [x["cpu"] for x in plain], "secure_all": [x["cpu"] for x in secure],
    }  # fmt: skip


def against(base: Path, cases: list[str], alternations: int) -> list[dict]:
    """This tree against the source tree ``base`` (e.g. ``git archive`` of an earlier
    commit, with this script copied in): one fresh process per measurement, the two
    trees alternating, so both see the same machine load; minima over the alternations.
    K ≥ 1,000 warms up with a plain fit only (a secure fit takes a minute there)."""
    here = Path(__file__).resolve().parents[1]
    # One key for every process of the comparison (the same draws, rounds and sizes in
    # both trees): $FEDPRIV_SECRET_KEY if set, else a fresh one for this comparison.
    key = os.environ.get("FEDPRIV_SECRET_KEY") or secrets.token_hex(32)
    rows = []
    for name in cases:
        got: dict[str, list[dict]] = {"base": [], "this": []}
        for _ in range(alternations):
            for label, tree in (("base", base), ("this", here)):
                cmd = [sys.executable, "-m", "fedpriv.experiments.secagg_cost", "--cases", name,
                       "--repeats", "1", "--line"]  # fmt: skip
                env = {**os.environ, "PYTHONPATH": str(tree), "FEDPRIV_SECRET_KEY": key}
                out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True)
                got[label].append(json.loads(out.stdout.strip().splitlines()[-1]))
        for label, runs in got.items():
            best = min(runs, key=lambda x: x["secure_cpu"])
            plain = min(x["plain_cpu"] for x in runs)
            s, setup, rounds = best["secure_cpu"], best["setup_cpu"], best["rounds"]
            rows.append({**best, "case": f"{name} {label}", "plain_cpu": plain,
                         "ratio": s / plain, "per_round_overhead": (s - plain - setup) / rounds,
                         "secure_all": [x["secure_cpu"] for x in runs],
                         "plain_all": [x["plain_cpu"] for x in runs]})  # fmt: skip
        print(table(rows[-2:]), flush=True)
    return rows


def profile(case: Case, top: int = 35) -> str:
    """cProfile of one secure fit (after a warm-up), sorted by internal time."""
    from fedpriv.experiments.keys import secret_key_for

    data = _data(case.dataset)
    key = secret_key_for("secagg-cost", case.name)
    fit_once(case, secure=True, data=data, key=key)
    prof = cProfile.Profile()
    prof.enable()
    fit_once(case, secure=True, data=data, key=key)
    prof.disable()
    out = io.StringIO()
    stats = pstats.Stats(prof, stream=out).sort_stats("tottime")
    stats.print_stats(top)
    stats.sort_stats("cumulative").print_stats(top)
    return out.getvalue()


def table(rows: list[dict]) -> str:
    head = (
        f"{'case':<11}{'K':>6}{'rounds':>7}{'plain s':>9}{'secure s':>10}{'ratio':>7}"
        f"{'setup s':>9}{'s/round':>9}{'target':>8}"
    )
    lines = [head]
    for r in rows:
        target = "" if r["target_ratio"] is None else f"≤{r['target_ratio']:g}×"
        lines.append(
            f"{r['case']:<11}{r['clients']:>6}{r['rounds']:>7}{r['plain_cpu']:>9.3f}"
            f"{r['secure_cpu']:>10.3f}{r['ratio']:>7.2f}{r['setup_cpu']:>9.3f}"
            f"{r['per_round_overhead']:>9.4f}{target:>8}"
        )
    return "\n".join(lines)


def write_report(rows: list[dict], path: Path) -> None:
    """``rows`` of :func:`measure` beside the floor of each case
    (:func:`fedpriv.experiments.secagg_floor.floor`: plain + set-up floor + rounds ×
    round floor, the cryptography alone), as a markdown report at ``path``."""
    from fedpriv.experiments.secagg_floor import floor

    lines = [
        "# Secure aggregation's CPU against plain sums, fit for fit",
        "",
        "`python -m fedpriv.experiments.secagg_cost --report "
        f"{path.name}` (module docstring: the method). Minimum over "
        f"{len(rows[0]['secure_all'])} alternating fits per mode; load average "
        f"{' '.join(rows[-1]['load'])} at the end. The floor is what the fit would cost "
        "if secure aggregation did nothing but its cryptography (`--floor`).",
        "",
        "| case | learner | K | rounds | plain s | secure s | ratio | set-up s | "
        "overhead s/round | floor: ratio | floor: s/round | target | met |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        name, case = r["case"], CASES[r["case"]]
        f = floor(r["clients"], case.words, rounds=r["rounds"])
        least = r["plain_cpu"] + f["setup_floor"] + r["rounds"] * f["round_floor"]
        if case.round_target is not None:
            target = f"≤ {case.round_target:g} s/round"
            met = r["per_round_overhead"] <= case.round_target
        elif case.fit_target is not None:
            target, met = f"≤ {case.fit_target:g} s a fit", r["secure_cpu"] <= case.fit_target
        else:
            target, met = f"≤ {case.target:g}×", r["ratio"] <= case.target
        lines.append(
            f"| {name} | {r['learner']} | {r['clients']} | {r['rounds']} | "
            f"{r['plain_cpu']:.3f} | {r['secure_cpu']:.3f} | {r['ratio']:.2f}× | "
            f"{r['setup_cpu']:.3f} | {r['per_round_overhead']:.4f} | "
            f"{least / r['plain_cpu']:.2f}× | {f['round_floor']:.4f} | {target} | "
            f"{'yes' if met else 'no'} |"
        )
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cases", nargs="*", default=list(CASES), choices=list(CASES))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--profile", choices=list(CASES), default=None)
    parser.add_argument("--floor", action="store_true")
    parser.add_argument("--against", type=Path, default=None, help="a base source tree")
    parser.add_argument("--alternations", type=int, default=3)
    parser.add_argument("--line", action="store_true", help="print one JSON line per case")
    parser.add_argument("--report", type=Path, default=None, help="write a markdown report")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    if args.profile:
        print(profile(CASES[args.profile]))
        return
    if args.floor:
        from fedpriv.experiments.secagg_floor import report

        print(report())
        return
    if args.against:
        rows = against(args.against, args.cases, args.alternations)
        print(f"load {Path('/proc/loadavg').read_text().split()[0]}\n{table(rows)}")
        if args.json:
            args.json.write_text(json.dumps(rows, indent=1))
        return
    rows = []
    for name in args.cases:
        case = CASES[name]
        rows.append(measure(case, args.repeats, warm_secure=case.clients < 1000))
        if args.line:
            print(json.dumps(rows[-1]), flush=True)
            continue
        print(table(rows[-1:]), flush=True)
    if args.line:
        return
    print(f"load {' '.join(rows[-1]['load'])}\n{table(rows)}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    if args.report:
        write_report(rows, args.report)


if __name__ == "__main__":
    main()
