"""The ServerApp's status.json and privacy journal, through the loopback harness (≈ 1 s a run)."""

import json

import numpy as np
import pytest
from fedpriv.strategies.boosting import DPBoostingStrategy

from fedpriv.artefact import load_model
from fedpriv.federation.status import RunFailedError
from tests.server.test_flower_loopback import RUN_ID, run_app

JOB = {
    "method": "boosting",
    "dataset": "heart",
    "num-clients": 4,
    "rounds": 4,
    "intercept": False,  # one tree per round
    "depth": 2,
    "epsilon": 2.0,
    "seed": 5,
}


def _json(out, name):
    return json.loads((out / f"{name}.json").read_text())


def test_a_completed_run_writes_its_status_and_a_complete_journal(monkeypatch, tmp_path):
    out = run_app(monkeypatch, tmp_path, JOB)
    status = _json(out, "status")
    assert status["status"] == "completed"
    assert (status["rounds_planned"], status["rounds_released"], status["rounds_aborted"]) == (
        4,
        4,
        0,
    )
    privacy = _json(out, "privacy")
    assert privacy["complete"] is True and privacy["n_releases"] == 4
    assert privacy["pld_value_discretization"] == 1e-4  # the final report, not the journal's
    comm = _json(out, "communication")
    assert (comm["rounds_planned"], comm["rounds_released"]) == (4, 4)
    # The one model file: the released ensemble (a tree per round), its schema and card.
    art = load_model(out / "model.fedpriv.npz")
    assert art.method == "boosting" and art.schema is not None
    leaves = art.model.to_arrays()["leaf_values"]
    assert leaves.shape[0] == 4 and np.all(np.isfinite(leaves)) and np.any(leaves != 0.0)
    card = art.card.to_dict()
    assert card["epsilon"] == privacy["epsilon"] and card["run_status"] == "completed"
    assert len(card["events"]) == 4


def test_a_strategy_raising_in_round_3_leaves_the_releases_made_and_a_failed_status(
    monkeypatch, tmp_path
):
    update = DPBoostingStrategy.update

    def crash_in_round_3(self, query, aggregate):
        if query.round == 2:
            raise RuntimeError("strategy bug in round 3")
        return update(self, query, aggregate)

    monkeypatch.setattr(DPBoostingStrategy, "update", crash_in_round_3)
    with pytest.raises(RuntimeError, match="strategy bug"):
        run_app(monkeypatch, tmp_path, JOB)
    out = tmp_path / str(RUN_ID)
    privacy = _json(out, "privacy")
    assert privacy["complete"] is False
    assert privacy["n_releases"] == 2  # rounds 1 and 2 released; round 3 raised before noise
    assert [e["label"].split(":")[0] for e in privacy["events"]] == ["round 0", "round 1"]
    status = _json(out, "status")
    assert status["status"] == "failed"
    # Round 3's sum was made (counted as run) but its update raised: 2 released.
    assert (
        "raised RuntimeError: strategy bug in round 3 (3 of 4 rounds run, 2 released)"
        in (status["reason"])
    )
    assert (status["rounds_run"], status["rounds_released"]) == (3, 2)
    assert not (out / "model.fedpriv.npz").exists()


def test_a_run_whose_rounds_mostly_abort_fails_after_writing_everything(monkeypatch, tmp_path):
    # ρ = 0.3 of 4 hospitals: most rounds ask fewer than two, and release nothing.
    with pytest.raises(RunFailedError, match=r"run failed: \d+ of 8 rounds released nothing"):
        run_app(monkeypatch, tmp_path, {**JOB, "rounds": 8, "participation": 0.3})
    out = tmp_path / str(RUN_ID)
    status = _json(out, "status")
    assert status["status"] == "failed" and status["rounds_aborted"] > 2  # > 25% of 8
    privacy = _json(out, "privacy")
    assert privacy["complete"] is True  # the run ended; it released too little
    assert privacy["n_releases"] == status["rounds_released"] == 8 - status["rounds_aborted"]
    assert _json(out, "communication")["rounds_aborted"] == status["rounds_aborted"]
