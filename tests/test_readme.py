"""The README's set-up block and its Python example stay true."""

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def _blocks(lang):
    return re.findall(rf"```{lang}\n(.*?)```", README, flags=re.S)


def test_readme_opens_with_the_two_setup_commands():
    first = README.split("```")[1]
    lines = [line for line in first.splitlines()[1:] if line.strip()]
    install = "python3 -m venv .venv && .venv/bin/pip install -e '.[dev]'"
    assert lines == [
        f"{install} && .venv/bin/python -m fedpriv.server.simulate",
        ".venv/bin/python -m pytest -q -n 2 --dist worksteal",
    ]
    ci = (ROOT / ".ci" / "run").read_text()
    assert f'install="{install}"' in ci  # CI installs as the README does
    assert "sed -n 2p" in ci  # and runs the README's own test line


def _run(code: str, tmp_path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={"FEDPRIV_CACHE_DIR": "off", "PATH": "/usr/bin:/bin"},
    )


def test_readme_python_examples_run(tmp_path):
    blocks = _blocks("python")
    (server_app,) = [b for b in blocks if "ServerApp()" in b]
    (learners,) = [b for b in blocks if "LumberjackClassifier" in b]
    (registering,) = [b for b in blocks if "register_method(" in b]
    (ledger_example,) = [b for b in blocks if b not in (server_app, learners, registering)]
    proc = _run(ledger_example, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert '"n_releases": 1' in proc.stdout
    proc = _run(learners, tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    from fedpriv.methods import methods

    assert sorted(line.split(":")[0] for line in lines) == sorted(
        m.estimator.split(":")[1] for m in methods()
    )
    for line in lines:
        auc, eps = re.fullmatch(r"\w+: AUC (\S+), ε spent (\S+)", line).groups()
        assert 0.5 < float(auc) <= 1 and 0 < float(eps) <= 2.0, line
    # The ServerApp example must at least import and define (Flower calls main).
    proc = _run(server_app + "\nprint(type(app).__name__, callable(main))", tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["ServerApp", "True"]


def test_readme_method_table_is_the_registry():
    from fedpriv.methods import methods

    rows = [r for r in README.splitlines() if r.startswith("| `") and "estimator" not in r]
    table = {r.split("|")[1].strip(" `"): r for r in rows if "strategies/" in r}
    assert sorted(table) == sorted(m.name for m in methods())
    for m in methods():
        for part in (m.strategy, m.client):
            assert m.module_of(part).replace(".", "/") + ".py" in table[m.name]
        assert m.maths.replace(".", "/") + ".py" in table[m.name]
        assert m.estimator.split(":")[1] in table[m.name]
        assert (ROOT / (m.module_of(m.strategy).replace(".", "/") + ".py")).exists()


def test_readme_is_a_manual_not_a_log():
    assert not re.search(r"\bissues? ?#?\d+", README, flags=re.I)
    assert "../" not in README and "TARGETS.md" not in README
