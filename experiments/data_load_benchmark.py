"""Load + encode timings of the bundled corpora, next to a bare pandas read.

For each corpus: cold (empty cache: read, preprocess, encode, split, store),
cached (second load) and a same-run baseline, ``pandas.read_csv`` of the same
file(s) with no encoding. Targets: full BRFSS (253,680 rows) ≤ 3 s cold and
≤ 0.3 s cached.

Usage::

    python -m fedpriv.experiments.data_load_benchmark
"""

from __future__ import annotations

import os
import sys
import tempfile
import time


def main() -> int:
    os.environ["FEDPRIV_CACHE_DIR"] = tempfile.mkdtemp(prefix="fedpriv-data-bench-")
    import pandas as pd

    from fedpriv.data import corpora

    root = corpora.data_dir()
    cases = [
        (
            "brfss full",
            lambda: corpora.load_brfss(full=True),
            [root / "brfss2015_diabetes" / "diabetes_012_health_indicators_BRFSS2015.csv.gz"],
        ),
        (
            "brfss 60k",
            lambda: corpora.load_brfss(),
            [root / "brfss2015_diabetes" / "diabetes_012_health_indicators_BRFSS2015.csv.gz"],
        ),
        (
            "diabetes130",
            lambda: corpora.load_diabetes130(),
            [root / "diabetes_130us" / "diabetic_data.csv.gz"],
        ),
        (
            "adult",
            lambda: corpora.load_adult(),
            [root / "adult" / "adult.data.gz", root / "adult" / "adult.test.gz"],
        ),
        (
            "heart",
            lambda: corpora.load_heart(),
            sorted((root / "heart_disease").glob("processed.*.data")),
        ),
    ]
    print(
        f"{'corpus':<12} {'rows':>8} {'d':>4} | {'cold s':>7} {'cached s':>9} | "
        f"{'pandas s':>8} {'cold/pandas':>11}"
    )
    worst = {}
    for name, load, files in cases:
        t0 = time.perf_counter()
        ds = load()
        cold = time.perf_counter() - t0
        t0 = time.perf_counter()
        load()
        warm = time.perf_counter() - t0
        t0 = time.perf_counter()
        for f in files:
            pd.read_csv(f, header=None, low_memory=False, skiprows=int(f.name == "adult.test.gz"))
        base = time.perf_counter() - t0
        worst[name] = (cold, warm)
        print(
            f"{name:<12} {ds.y.size:>8} {ds.X.shape[1]:>4} | {cold:>7.3f} {warm:>9.4f} | "
            f"{base:>8.3f} {cold / base:>10.1f}x"
        )
    cold, warm = worst["brfss full"]
    ok = cold <= 3.0 and warm <= 0.3
    print(
        f"full BRFSS: cold {cold:.2f} s (target <= 3 s), cached {warm:.3f} s (target <= 0.3 s): "
        f"{'met' if ok else 'NOT met'}"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
