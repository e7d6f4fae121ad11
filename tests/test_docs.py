"""The manual builds (MkDocs, strict), its reference pages cover the code, and its
Python examples run.

The build runs ``mkdocs build --strict`` once per session into a temporary folder:
strict mode turns every warning (a broken link or anchor, a page missing from the
nav, a nav entry without a page) into a failure. The reference pages are generated
by the build's hook (``docs/hooks/reference.py``) from the code; the checks below
read the built HTML, so a command or a key the hook drops fails here.
"""

import html
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.test_readme import _run  # one way to run a manual's example

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"


def _page(name: str) -> str:
    return (DOCS / name).read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    pytest.importorskip("mkdocs", reason="mkdocs is not installed (pip install -e '.[dev]')")
    out = tmp_path_factory.mktemp("site")
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(out)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={"PATH": "/usr/bin:/bin", "FEDPRIV_CACHE_DIR": "off", "PYTHONPATH": str(ROOT)},
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "WARNING" not in proc.stdout + proc.stderr
    return out


def _text(site: Path, page: str) -> str:
    """A built page's main content, tags stripped to their text (code kept as text)."""
    raw = (site / page / "index.html").read_text(encoding="utf-8")
    main = raw[raw.index('role="main"') :]
    return html.unescape(re.sub(r"<[^>]+>", "", main))


def test_docs_build_strict_with_every_page_in_the_nav(site):
    written = {p.relative_to(DOCS).with_suffix("").as_posix() for p in DOCS.rglob("*.md")}
    written = {w for w in written if not w.startswith("hooks/")}
    for page in written | {"reference/cli", "reference/run-config"}:
        page = page.removesuffix("/index").removesuffix("index")
        assert (site / page / "index.html").is_file(), page


def test_cli_reference_lists_every_command_and_option(site):
    import click
    from fedpriv.server.cli import cli

    text = _text(site, "reference/cli")
    seen = 0

    def walk(path, cmd):
        nonlocal seen
        assert f"{path}\n" in text or f"{path}¶" in text, path  # its heading
        assert cmd.get_usage(click.Context(cmd, info_name=path)).split(" ", 1)[1] in text
        for p in cmd.params:
            for opt in getattr(p, "opts", []):
                if opt.startswith("-"):
                    assert opt in text, (path, opt)
        seen += 1
        if isinstance(cmd, click.Group):
            for name in cmd.list_commands(click.Context(cmd)):
                walk(f"{path} {name}", cmd.get_command(click.Context(cmd), name))

    walk("fedpriv", cli)
    assert seen >= 12
    for forwarded in ("--data", "--eval-data", "--insecure", "--quick"):  # deploy, bench
        assert forwarded in text


def test_run_config_reference_lists_every_key(site):
    from dataclasses import fields

    from fedpriv.federation.settings import RunSettings
    from fedpriv.methods import methods

    raw = (site / "reference/run-config/index.html").read_text(encoding="utf-8")
    for key in RunSettings.run_keys():
        assert f"<code>{key.replace('_', '-')}</code>" in raw, key
    names = [m.name for m in methods()]
    for i, m in enumerate(methods()):
        start = raw.index(f'<h3 id="{m.name}">')
        end = raw.index(f'<h3 id="{names[i + 1]}">') if i + 1 < len(names) else len(raw)
        section = raw[start:end]
        for f in fields(m.config_class):
            assert f"<code>{f.name.replace('_', '-')}</code>" in section, (m.name, f.name)


def test_file_format_and_exit_code_references_follow_the_code(site):
    from fedpriv.server.cli_errors import input_errors, run_errors

    from fedpriv.artefact import ARTEFACT_NAME
    from fedpriv.federation.status import RunOutcome
    from fedpriv.methods import model_classes
    from fedpriv.privacy.node_audit import KINDS

    formats = _text(site, "reference/file-formats")
    for name in (ARTEFACT_NAME, "privacy.json", "status.json", *model_classes(), *KINDS):
        assert name in formats, name
    for field in RunOutcome.__dataclass_fields__:
        assert field in formats, field
    codes = _text(site, "reference/exit-codes")
    for cls in (*input_errors(), *run_errors()):
        assert f"{cls.__module__}.{cls.__name__}" in codes


def _python(page: str) -> str:
    (block,) = re.findall(r"```python\n(.*?)```", _page(page), flags=re.S)
    return block


def test_docs_ledger_and_registration_examples_run(tmp_path):
    proc = _run(_python("explanation/privacy-core.md"), tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert '"n_releases": 1' in proc.stdout
    registering = _python("how-to/add-a-method.md")
    assert "register_method(" in registering and "def register()" in registering
    # The record names a package that does not exist here: registration checks every
    # part and refuses, naming the part, and the registry keeps nothing.
    check = (
        "\nfrom fedpriv.method_check import MethodContractError"
        "\nfrom fedpriv.methods import method_names"
        "\ntry:\n    register()\nexcept MethodContractError as e:\n    print('refused:', e)"
        "\nprint('my_method' in method_names())"
    )
    proc = _run(registering + check, tmp_path)
    assert proc.returncode == 0, proc.stderr
    first, last = proc.stdout.strip().splitlines()[0], proc.stdout.strip().splitlines()[-1]
    assert first.startswith("refused: method 'my_method'") and "my_package" in first
    assert last == "False"


def test_docs_server_app_example_defines_a_server_app(tmp_path):
    server_app = _python("how-to/consortium-deployment.md")
    # Flower calls main; the example must at least import and define it.
    proc = _run(server_app + "\nprint(type(app).__name__, callable(main))", tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["ServerApp", "True"]


def test_docs_every_learner_example_runs(tmp_path):
    learners = _python("how-to/estimators.md")
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
