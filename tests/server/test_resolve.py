"""One resolver: every entry point resolves the same job to the same settings.

``fedpriv run`` in process, ``fedpriv run --flower`` (resolved as its launcher
resolves it, nothing started), ``python -m fedpriv.server.simulate`` and the
estimators, for every registered method, without a preset and with the main job's;
and the files an in-process run writes name the run that happened.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from fedpriv.server import cli_run, simulate
from fedpriv.server.cli import main
from fedpriv.server.method_estimator import RUN_PARAMS, MethodEstimator
from fedpriv.server.resolve import resolve

from fedpriv.data.node import declared_max_records
from fedpriv.federation.presets import MAIN_JOB, compose, get_preset
from fedpriv.federation.settings import RunSettings, SettingError
from fedpriv.methods import get_method, method_names


class _Resolved(Exception):
    """Raised by a stand-in for the first step after resolution: carries the run."""


def _in_process(monkeypatch, argv):
    """The settings ``fedpriv run ARGV`` (in process) resolves; no row is read."""

    def stop(run, **_):
        raise _Resolved(run)

    monkeypatch.setattr(cli_run, "choose_data", stop)
    with pytest.raises(_Resolved) as got:
        main(["run", *argv])
    return got.value.args[0]


def _launcher(monkeypatch, entry, argv):
    """The settings a simulation launched by ``entry(ARGV)`` resolves, as ``simulate``
    resolves them (:func:`fedpriv.server.simulate.resolve_simulation`); nothing starts."""
    seen = []

    def fake(overrides, *, preset, **_):
        seen.append(simulate.resolve_simulation(overrides, preset))
        return 0, None

    monkeypatch.setattr(simulate, "simulate", fake)
    assert entry(argv) == 0
    (run,) = seen
    return run


def _estimator_view(settings: RunSettings) -> dict:
    """The settings an estimator holds: the method, its configuration, the run's own."""
    run = {k: getattr(settings, k) for k in RUN_PARAMS if k != "num_clients"}
    return {"method": settings.method, "config": settings.config, **run}


@pytest.mark.parametrize("preset", [None, MAIN_JOB])
@pytest.mark.parametrize("method", method_names())
def test_every_entry_point_resolves_the_same_settings(monkeypatch, tmp_path, method, preset):
    out = str(tmp_path / "out")
    chosen = [] if preset is None else ["--preset", preset]
    argv = ["--method", method, *chosen, "--out", out]
    in_process = _in_process(monkeypatch, argv)
    flower = _launcher(monkeypatch, main, ["run", "--flower", *argv])
    launcher = _launcher(
        monkeypatch,
        simulate.main,
        ["--set", f"method={method}", "--preset", preset or "none", "--out-dir", out],
    )
    assert in_process.settings == flower.settings == launcher.settings
    assert in_process.run_config == flower.run_config == launcher.run_config
    assert in_process.preset == flower.preset == launcher.preset == preset
    s = in_process.settings
    # K and the bound derived from the corpus (Diabetes 130-US, its public largest client).
    assert (s.dataset, s.num_clients) == ("diabetes130", 5)
    assert s.max_records == declared_max_records("diabetes130", 5, 0)
    # The estimator: at its defaults (no preset) or from_preset, the same settings ...
    cls = get_method(method).estimator_class
    est = cls() if preset is None else cls.from_preset(preset)
    # (its automatic settings, 0 among the parameters, resolved as the run resolves them)
    assert _estimator_view(est.run_settings().for_records(s.public_records)) == _estimator_view(s)
    # ... and the one the CLI builds from the settings gives them all back, typed.
    built = MethodEstimator.from_settings(s)
    assert type(built) is cls and (built.num_clients, built.max_records) == (5, s.max_records)
    assert built.run_settings(s) == s
    # The preset's method keys only for its own method; otherwise the dataclass defaults.
    mine = {} if preset is None else get_preset(preset).applied(method)
    m = get_method(method)
    own = {k.replace("-", "_"): v for k, v in mine.items()}
    given = m.make_config(**{k: v for k, v in own.items() if k in m.config_fields})
    eps, dlt = s.training_budget  # automatic settings: the one resolution, from public facts
    defaults = m.resolve_config(given, epsilon=eps, delta=dlt, n_records=s.public_records)
    for f in defaults.__dataclass_fields__:
        assert getattr(s.config, f) == getattr(defaults, f), (method, f)


def test_one_default_method_and_the_main_job_only_by_its_preset(monkeypatch, tmp_path):
    out = ["--out", str(tmp_path)]
    plain = _in_process(monkeypatch, out).settings
    assert plain.method == RunSettings.method == RunSettings().method
    assert _launcher(monkeypatch, main, ["run", "--flower", *out]).settings == plain
    # dp_gam without a preset: its dataclass defaults on every path (was 8 bins, gain
    # order, learning-rate 0.5, lam 10 under --flower only).
    gam = _launcher(monkeypatch, main, ["run", "--flower", "--method", "dp_gam", *out]).settings
    assert gam == _in_process(monkeypatch, ["--method", "dp_gam", *out]).settings
    cfg = gam.config
    assert (cfg.bins, str(cfg.column_order), cfg.learning_rate, cfg.lam) == (16, "cyclic", 1.0, 5.0)
    assert gam.config == get_method("dp_gam").estimator_class().run_settings().config
    # The simulation launcher's default is the main job, unchanged: dp_gam at its settings.
    job = _launcher(monkeypatch, simulate.main, ["--out-dir", str(tmp_path)]).settings
    assert job.method == "dp_gam" and job.poll_interval == 0.01
    cfg = job.config
    assert (cfg.bins, str(cfg.column_order), cfg.learning_rate, cfg.lam) == (8, "gain", 0.5, 10.0)
    assert (job.dataset, job.num_clients, job.epsilon) == ("diabetes130", 5, 2.0)
    assert _in_process(monkeypatch, ["--preset", MAIN_JOB, *out]).settings == job


def test_a_preset_is_named_or_refused_and_overrides_win():
    with pytest.raises(SettingError, match=r"preset must be one of \[.*'main-job'.*\].*'main-jb'"):
        resolve({}, preset="main-jb")
    run = resolve({"bins": 32, "epsilon": 1.0}, preset=MAIN_JOB)
    assert (run.settings.config.bins, run.settings.epsilon, run.preset) == (32, 1.0, MAIN_JOB)
    assert run.settings.config.learning_rate == 0.5  # the preset's where not overridden
    # Another method: the preset's run keys, not its dp_gam keys (learning-rate, lam are
    # boosting's keys too).
    boost = compose({"method": "boosting"}, MAIN_JOB)
    assert "learning-rate" not in boost and boost["poll-interval"] == 0.01


def test_an_in_process_run_writes_the_run_that_happened(tmp_path, capsys):
    out = tmp_path / "D"
    assert main(["run", "--method", "random_forest", "--dataset", "heart", "--out", str(out)]) == 0
    assert "run completed" in capsys.readouterr().out
    run = json.loads((out / "privacy.json").read_text())["run"]
    config = run["config"]
    bound = declared_max_records("heart", 4, 0)
    assert run["source"] == "heart" and run["preset"] is None
    assert (config["dataset"], config["num-clients"]) == ("heart", 4)
    assert config["method"] == "random_forest" and config["max-records"] == bound
    assert config["out-dir"] == str(out.resolve())
    job = {"method": "random_forest", "dataset": "heart", "out-dir": str(out.resolve())}
    assert config == resolve(job).run_config  # what the Flower launcher resolves
    with np.load(out / "model.fedpriv.npz", allow_pickle=False) as model:
        meta = json.loads(str(model["__meta__"][()]))
    params = meta["extra"]["params"]
    assert (params["num_clients"], params["max_records"]) == (4, bound)
