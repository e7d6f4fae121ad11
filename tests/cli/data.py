"""Small hospital files of the example schema whose label follows age (learnable)."""

from pathlib import Path

import numpy as np

SCHEMA = "experiments/schemas/example.toml"
HEADER = "record_id,hospital,age,length_of_stay_days,admission,smoker,readmitted\n"


def rows(n: int, seed: int, *, flip: bool = False) -> list[str]:
    """``n`` rows over hospitals a, b, c; readmitted = yes mostly for the old (``flip``:
    for the young). The seed is the test's public one: these rows are fixtures."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        age = int(rng.integers(18, 100))
        old = rng.random() < 1.0 / (1.0 + np.exp(-(age - 60) / 6))
        label = "yes" if old != flip else "no"
        adm = ("emergency", "elective")[int(rng.integers(2))]
        smoker = ("yes", "no")[int(rng.integers(2))]
        out.append(f"{i},{'abc'[i % 3]},{age},{int(rng.integers(0, 20))},{adm},{smoker},{label}\n")
    return out


def write(path: Path, lines: list[str]) -> Path:
    path.write_text(HEADER + "".join(lines))
    return path
