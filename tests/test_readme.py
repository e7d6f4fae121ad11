"""The README's set-up block, quickstart and method table stay true; README and manual
read as a manual, not a log."""

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
DOCS = ROOT / "docs"
#: The manual's hand-written pages (the reference pages are generated at build time).
PAGES = sorted(p for p in DOCS.rglob("*.md") if "hooks" not in p.parts)
LINK = re.compile(r"\]\(([^)\s]+)\)")


def _blocks(lang, text=README):
    return re.findall(rf"```{lang}\n(.*?)```", text, flags=re.S)


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


def test_readme_gives_the_flower_process_tests_their_command():
    """.ci/run evaluates the README's first line naming ``-m processes``: it must be
    that pytest command, not prose."""
    ci = (ROOT / ".ci" / "run").read_text()
    assert "grep -m1 -- '-m processes' README.md" in ci
    line = next(ln for ln in README.splitlines() if "-m processes" in ln)
    assert line == ".venv/bin/python -m pytest -q -m processes -n 2 --dist worksteal"


def _run(code: str, tmp_path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={"FEDPRIV_CACHE_DIR": "off", "PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)},
    )


def test_readme_quickstart_runs(tmp_path):
    (quickstart,) = _blocks("python")
    assert len(quickstart.splitlines()) <= 20
    assert "from fedpriv import DPGAMClassifier" in quickstart
    proc = _run(quickstart, tmp_path)
    assert proc.returncode == 0, proc.stderr
    auc, acc, eps, status = re.fullmatch(
        r"AUC (\S+), accuracy (\S+)\nε spent (\S+), run (\w+)\n", proc.stdout
    ).groups()
    assert 0.5 < float(auc) <= 1 and 0.5 < float(acc) <= 1
    assert 1.98 <= float(eps) <= 2.0 and status in ("completed", "degraded")
    from fedpriv.artefact import load_model

    assert load_model(tmp_path / "heart-gam.fedpriv.npz").card is not None


def test_readme_method_table_is_the_registry():
    from fedpriv.methods import methods

    rows = [r for r in README.splitlines() if r.startswith("| `") and "estimator" not in r]
    table = {r.split("|")[1].strip(" `"): r for r in rows if "strategies/" in r}
    assert sorted(table) == sorted(m.name for m in methods())
    for m in methods():
        for part in (m.strategy, m.client):
            assert _source(m.module_of(part)) in table[m.name]
        assert _source(m.maths) in table[m.name]
        assert f"`{m.model.split(':')[1]}`" in table[m.name]
        assert m.estimator.split(":")[1] in table[m.name]


def _source(module: str) -> str:
    """The checkout path of a module (``fedpriv.strategies.gam`` → ``strategies/gam.py``)."""
    import importlib.util

    return Path(importlib.util.find_spec(module).origin).relative_to(ROOT).as_posix()


def test_readme_is_short_and_its_links_resolve():
    assert len(README.splitlines()) <= 300
    for target in LINK.findall(README):
        if target.startswith(("http://", "https://", "#")):
            continue
        assert (ROOT / target.split("#")[0]).is_file(), target


def _manual_not_log(name: str, text: str) -> None:
    assert not re.search(r"\bissues? ?#?\d+", text, flags=re.I), name
    assert "TARGETS.md" not in text, name
    # No path of the machine the text was written on.
    assert not re.search(r"(?<![\w.])/(?:work|home|Users|root)/", text), name


def test_readme_is_a_manual_not_a_log():
    _manual_not_log("README.md", README)
    assert "../" not in README


def test_the_manual_is_a_manual_not_a_log():
    assert len(PAGES) >= 20
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        name = page.relative_to(ROOT).as_posix()
        _manual_not_log(name, text)
        for target in LINK.findall(text):
            if target.startswith(("http://", "https://", "#")):
                continue
            # A link stays inside docs/: the manual builds from that folder alone.
            where = (page.parent / target.split("#")[0]).resolve()
            assert where.is_relative_to(DOCS), (name, target)
