"""The README's "Your own data" walk-through, run as written on three small hospital files.

The commands are the README's own (the bash block of that section), run in order
through ``fedpriv.server.cli.main`` in a folder holding the files it names; the draft's
placeholders are filled with the README's own filled tables (its toml block), so
neither can drift from the product. The test only adds fast settings (few rounds).

The deployment is the README's command as written: TLS with node authentication,
each SuperNode given only its own file in its own folder, the ServerApp no data
path. It runs through ``fedpriv.server.deploy.main`` (what ``fedpriv deploy`` calls, less
the redirection of Flower's output) so that the third node can start late, after
the run's ServerApp, and be waited for; under an injected secret key the released
model equals the in-process fit on the same three files, bit for bit.
"""

import csv
import json
import re
import shlex
import tomllib
from pathlib import Path

import numpy as np
import pytest
from fedpriv.server import deploy as deploy_mod
from fedpriv.server.cli import main
from fedpriv.server.estimators import DPBoostingClassifier
from fedpriv.strategies.boosting import BoostingConfig

from fedpriv.artefact import load_model
from fedpriv.data.draft import PLACEHOLDER
from fedpriv.data.node import files_dataset, run_schema
from fedpriv.privacy.randomness import KEY_ENV
from tests.keys import key_for, key_hex

README = Path(__file__).resolve().parents[2] / "README.md"
HOSPITALS = ("north", "south", "east")
ROWS = 150  # per hospital
NEW_ROWS = 20
#: Appended to the README's commands to keep the test fast.
FAST = {"run": ["--set", "rounds=5"], "deploy": ["--set", "rounds=1"]}
KEY = 4  # injected into the deployment's processes and the in-process reference
RUN_LINE = re.compile(r"AUC (\S+) \| ε spent (\S+) \(PLD\), (\S+) \(RDP\) \| run (\w+)")
DEPLOY_LINE = re.compile(
    r"AUC (n/a|[\d.]+) \| ε spent (\S+) \(PLD\), (\S+) \(RDP\) \| (\w+): 1 of 1 rounds released"
)


def _section() -> str:
    text = README.read_text(encoding="utf-8")
    start = text.index("\n## Your own data\n")
    return text[start : text.index("\n## ", start + 1)]


def _commands(section: str) -> list[list[str]]:
    """The section's shell commands, each as ``fedpriv``'s argv (continuations joined)."""
    (block,) = re.findall(r"```bash\n(.*?)```", section, flags=re.S)
    lines = [ln for ln in block.replace("\\\n", " ").splitlines() if ln.strip()]
    argvs = [a for a in (shlex.split(ln, comments=True) for ln in lines) if a]
    assert all(a[0] == "fedpriv" for a in argvs), argvs
    return [a[1:] for a in argvs]


def _fill(draft: str, filled: dict) -> str:
    """The draft with every placeholder line replaced by the README's value for that
    key of that table ([target], or the [[columns]] entry of the same name)."""
    by_table = {"[target]": filled["target"], **{c["name"]: c for c in filled["columns"]}}
    out = []
    for block in draft.split("\n\n"):
        lines = block.splitlines()
        head = [ln for ln in lines if not ln.startswith("#")][:2]
        table = None
        if head[:1] == ["[target]"]:
            table = by_table["[target]"]
        elif head[:1] == ["[[columns]]"]:
            table = by_table[tomllib.loads(head[1])["name"]]
        for i, line in enumerate(lines):
            if PLACEHOLDER in line:
                key = line.split("=")[0].strip()
                lines[i] = f"{key} = {json.dumps(table[key])}"  # a TOML value too
        out.append("\n".join(lines))
    return "\n\n".join(out)


def _write_files(folder: Path) -> None:
    """Three hospitals' files, the pooled file and rows to score (the README's names)."""
    rng = np.random.default_rng(7)
    header = ["hospital", "age", "admission", "readmitted"]
    pooled = []
    for h in HOSPITALS:
        age = rng.integers(18, 95, ROWS)
        adm = rng.choice(["emergency", "elective", "transfer"], ROWS, p=[0.5, 0.35, 0.15])
        logit = 0.05 * (age - 60) + 1.2 * (adm == "emergency") - 0.6
        y = np.where(rng.random(ROWS) < 1 / (1 + np.exp(-logit)), "yes", "no")
        rows = [[h, str(a), d, t] for a, d, t in zip(age, adm, y, strict=True)]
        pooled += rows
        (folder / h).mkdir()
        with open(folder / h / "patients.csv", "w", newline="") as fh:
            csv.writer(fh).writerows([header, *rows])
    with open(folder / "hospitals.csv", "w", newline="") as fh:
        csv.writer(fh).writerows([header, *pooled])
    with open(folder / "new_patients.csv", "w", newline="") as fh:
        csv.writer(fh).writerows([["age", "admission"], *(r[1:3] for r in pooled[:NEW_ROWS])])


@pytest.mark.processes
def test_the_readme_walkthrough_runs_on_three_hospital_files(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    _write_files(tmp_path)
    section = _section()
    draft, run, deploy, predict, inspect = _commands(section)
    assert [draft[:2], run[0], deploy[0], predict[0], inspect[0]] == [
        ["schema", "draft"], "run", "deploy", "predict", "inspect"
    ]  # fmt: skip

    # 1. The draft: names and types only, every value a placeholder.
    assert main(draft) == 0
    schema = tmp_path / draft[draft.index("--out") + 1]
    n = schema.read_text().count(f'"{PLACEHOLDER}"')
    assert f"{n} 'FILL ME' placeholders" in capsys.readouterr().out and n == 5

    # 2. Refused, naming the first placeholder, until filled as the README shows.
    assert main(run + FAST["run"]) == 2
    first = (
        rf"\[target\]: positive is still the draft placeholder 'FILL ME' \({n} placeholders left"
    )
    said = capsys.readouterr().err  # the fedpriv log line
    assert re.search(first, said), said
    assert main(deploy + FAST["deploy"]) == 2  # before any process starts
    said = capsys.readouterr().err
    assert re.search(first, said) and "SuperLink" not in said, said
    (toml,) = re.findall(r"```toml\n(.*?)```", section, flags=re.S)
    schema.write_text(_fill(schema.read_text(), tomllib.loads(toml)))
    assert PLACEHOLDER not in schema.read_text()

    # 3. In process: the held-out AUC and ε, the model file.
    assert main(run + FAST["run"]) == 0
    auc, eps_pld, eps_rdp, status = RUN_LINE.search(capsys.readouterr().out).groups()
    assert 0.0 <= float(auc) <= 1.0 and status == "completed"
    assert 1.5 < float(eps_pld) <= 2.0 + 1e-9 and float(eps_rdp) >= float(eps_pld)
    assert (tmp_path / run[run.index("--out") + 1] / "model.fedpriv.npz").is_file()

    # 4. The federation: one node per file, the declared bound, no row at the server;
    # TLS and node authentication, the third node late.
    # The key reaches the SuperNodes only when shared (--share-secret-key).
    monkeypatch.setenv(KEY_ENV, key_hex(KEY))
    at_submission = []
    code = deploy_mod.main(
        deploy[1:] + FAST["deploy"] + ["--share-secret-key"],
        late_nodes=1,
        quiet=True,
        on_submit=lambda fed: at_submission.append(sorted(fed.nodes)),
    )
    assert code == 0
    assert at_submission == [[0, 1]]  # node 2 started only after the run (and its ServerApp)
    auc, eps_pld, _, status = DEPLOY_LINE.search(capsys.readouterr().out).groups()
    assert status == "completed" and 0.0 < float(eps_pld) <= 2.0 + 1e-9
    latest = tmp_path / deploy[deploy.index("--out-dir") + 1] / "latest"
    config = json.loads((latest / "config.json").read_text())
    assert config["num-clients"] == 3 and config["max-records"] == 200
    assert config["schema"] == str(schema.resolve())  # every process reads the same file
    assert "data-path" not in config
    files = [tmp_path / h / "patients.csv" for h in HOSPITALS]
    assert deploy[2:7:2] == [str(f.relative_to(tmp_path)) for f in files]
    # The released model is the in-process fit on the same three files, bit for bit.
    saved = load_model(latest / "model.fedpriv.npz").model.to_arrays()
    # The job is the in-process run's (step 3): the method's defaults, not a demo's.
    settings = {k: config[k] for k in ("method", "rounds", "depth", "epsilon", "seed")}
    depth = BoostingConfig().depth
    assert settings == {"method": "boosting", "rounds": 1, "depth": depth, "epsilon": 2.0,
                        "seed": 0}  # fmt: skip
    ref = DPBoostingClassifier(
        rounds=1, depth=depth, epsilon=2.0, seed=0, secret_key=key_for(KEY), max_records=200
    ).fit(files_dataset(files, run_schema(str(schema), "")))
    for key, value in ref.model_.to_arrays().items():
        np.testing.assert_array_equal(saved[key], value, err_msg=key)
    assert float(eps_pld) == pytest.approx(ref.epsilon_spent_)
    assert Path(predict[1]).parent == latest.relative_to(tmp_path)  # the README scores it

    # 5. One score per row of the new file, in [0, 1]; the card states ε.
    assert main(predict) == 0
    scores = (tmp_path / predict[predict.index("--out") + 1]).read_text().split()
    assert scores[0] == "score" and len(scores) == 1 + NEW_ROWS
    assert all(0.0 <= float(s) <= 1.0 for s in scores[1:])
    capsys.readouterr()
    assert main(inspect) == 0
    card = capsys.readouterr().out
    assert re.search(rf"\(ε, δ\) = \({float(eps_pld):.6g}, 1e-05\), \*\*certified\*\*", card)
    assert "* record_bound: `200`" in card
