"""fedpriv.logs: one hierarchy, one handler set by entry points, the launchers' line format."""

import ast
import logging
from pathlib import Path

import pytest

from fedpriv import logs

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def fedpriv_logger():
    root = logging.getLogger("fedpriv")
    saved = (root.handlers[:], root.level, root.propagate)
    root.propagate = True  # as in a fresh process (tests/conftest.py sets it False)
    yield root
    root.handlers[:], root.level, root.propagate = saved[0], saved[1], saved[2]


def test_application_modules_join_the_fedpriv_hierarchy():
    assert logs.get_logger("fedpriv.server.app").name == "fedpriv.server.app"
    assert logs.get_logger("fedpriv.privacy.ledger").name == "fedpriv.privacy.ledger"
    assert logs.get_logger("fedpriv").name == "fedpriv"
    assert logs.get_logger("fedprivate").name == "fedpriv.fedprivate"


def test_configure_prints_tagged_lines_to_the_current_stream(fedpriv_logger, capsys):
    logs.configure(tag="fedpriv", stream="stdout")
    logs.configure(tag="fedpriv", stream="stdout")  # again: still one line per record
    # The handler looks the stream up per record: capsys swapped sys.stdout after
    # this test began, as Flower does in a ServerApp process.
    logs.get_logger("fedpriv.server.app").info("test AUC %.4f  AUPRC %.4f", 0.81234, 0.5)
    logs.get_logger("fedpriv.server.app").debug("not shown at INFO")
    out, err = capsys.readouterr()
    assert out == "[fedpriv] test AUC 0.8123  AUPRC 0.5000\n"
    assert err == ""


def test_configure_level_and_stderr_and_no_propagation(fedpriv_logger, capsys):
    seen = []
    catcher = logging.Handler()
    catcher.emit = seen.append
    logging.getLogger().addHandler(catcher)
    try:
        logs.configure("WARNING", tag="deploy")
        log = logs.get_logger("fedpriv.server.deploy")
        log.info("hidden")
        log.warning("interrupted; stopping")
    finally:
        logging.getLogger().removeHandler(catcher)
    out, err = capsys.readouterr()
    assert (out, err) == ("", "[deploy] interrupted; stopping\n")
    assert fedpriv_logger.propagate is False
    assert [r for r in seen if r.name.startswith("fedpriv")] == []  # root's handlers: nothing


def _configuring_calls(tree):
    """(line, enclosing function) of each logs.configure / basicConfig / addHandler call."""
    hits = []

    def visit(node, func):
        for child in ast.iter_child_nodes(node):
            name = child.name if isinstance(child, ast.FunctionDef) else func
            if isinstance(child, ast.Call) and isinstance(child.func, ast.Attribute):
                if child.func.attr in {"configure", "basicConfig", "addHandler"}:
                    hits.append((child.lineno, func))
            visit(child, name)

    visit(tree, None)
    return hits


def test_only_entry_points_configure_logging():
    # Libraries never add handlers: only a CLI's or the ServerApp's main() does.
    offenders = [
        f"{path.relative_to(ROOT)}:{line} in {func}"
        for layer in ("fedpriv", "strategies", "clients", "server", "experiments")
        for path in sorted((ROOT / layer).rglob("*.py"))
        if path != ROOT / "fedpriv" / "logs.py"
        for line, func in _configuring_calls(ast.parse(path.read_text()))
        if func not in ("main", "cli")  # server/cli.py's click group is its main
    ]
    assert offenders == []
    assert _configuring_calls(ast.parse("def f():\n    logs.configure()\n")) == [(2, "f")]
