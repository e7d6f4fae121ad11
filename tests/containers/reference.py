"""The in-process twin of a consortium run, compared bit for bit with what it released.

    python tests/containers/reference.py RESULTS_DIR FILE0 FILE1 FILE2

Run on the host, under the reproduction key the run was given
(``$FEDPRIV_SECRET_KEY``): the run's settings come from its ``config.json``, the
hospitals' files are the ones its nodes held (file i is node i's), and the fit is
``DPBoostingClassifier(...).fit(files_dataset(...))``, the estimator a user calls.
Every array of the released ``model.fedpriv.npz`` must equal the fit's exactly,
and ε must agree; the same fit under a fresh key must differ (the control).
Exit code 0 equal, 1 not (each differing array named).
Called by ``tests/containers/two_machines.sh``; not part of pytest's suite.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from pathlib import Path

import numpy as np

log = logging.getLogger("reference")


def main(argv: list[str] | None = None) -> int:
    from fedpriv.server.estimators import DPBoostingClassifier

    from fedpriv.artefact import load_model
    from fedpriv.data.node import files_dataset, run_schema
    from fedpriv.privacy.randomness import KEY_ENV, SecretKey

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", type=Path, help="the run's results folder")
    ap.add_argument("files", nargs="+", type=Path, help="the hospitals' files, node 0 first")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="[reference] %(message)s")

    key = os.environ.get(KEY_ENV, "")
    if not key:
        log.error("$%s is not set: the run's reproduction key is needed", KEY_ENV)
        return 2
    config = json.loads((args.results / "config.json").read_text())
    if config["method"] != "boosting" or config["num-clients"] != len(args.files):
        log.error("a boosting run on %d files expected; got %s on %s nodes",
                  len(args.files), config["method"], config["num-clients"])  # fmt: skip
        return 2
    settings = {k: config[k] for k in ("rounds", "depth", "epsilon", "seed", "max-records")}
    log.info("in-process fit on %d files: %s", len(args.files), settings)
    schema = run_schema(str(config.get("schema") or ""), str(config.get("dataset") or ""))
    ref = DPBoostingClassifier(
        rounds=settings["rounds"], depth=settings["depth"], epsilon=settings["epsilon"],
        seed=settings["seed"], max_records=settings["max-records"],
        secret_key=SecretKey.from_hex(key),
    ).fit(files_dataset(list(args.files), schema))  # fmt: skip

    released = load_model(args.results / "model.fedpriv.npz").model.to_arrays()
    mine = ref.model_.to_arrays()
    differ = sorted(
        k
        for k in set(released) | set(mine)
        if k not in released or k not in mine or not np.array_equal(released[k], mine[k])
    )
    privacy = json.loads((args.results / "privacy.json").read_text())
    log.info("ε: run %r, in process %r", privacy["epsilon"], ref.epsilon_spent_)
    if abs(float(privacy["epsilon"]) - float(ref.epsilon_spent_)) > 1e-9:
        log.error("NOT equal: ε differs")
        return 1
    if differ:
        log.error("NOT bit-for-bit equal: %d of %d arrays differ: %s",
                  len(differ), len(mine), ", ".join(differ))  # fmt: skip
        return 1
    log.info("bit-for-bit equal: all %d arrays of the released model", len(mine))
    # The control: under another key the same fit differs, so the comparison can fail.
    other = DPBoostingClassifier(
        rounds=settings["rounds"], depth=settings["depth"], epsilon=settings["epsilon"],
        seed=settings["seed"], max_records=settings["max-records"],
        secret_key=SecretKey.generate(),
    ).fit(files_dataset(list(args.files), schema))  # fmt: skip
    theirs = other.model_.to_arrays()
    if all(np.array_equal(released[k], theirs[k]) for k in released):
        log.error("the fit under a fresh key equals the release too: the comparison proves nothing")
        return 1
    log.info("control: the fit under a fresh key differs from the release")
    return 0


if __name__ == "__main__":
    sys.exit(main())
