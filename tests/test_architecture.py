"""Repository-wide rules: no global RNG, a pure privacy core, one-way imports, lint."""

import ast
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.keys import private_rng

ROOT = Path(__file__).resolve().parents[1]
LIBRARY = ROOT / "fedpriv"
APP_LAYERS = ("strategies", "clients", "server", "experiments")
# Constructors of injected generators are fine; everything else on np.random
# (seed, rand, normal, choice, shuffle, RandomState, ...) touches global state.
ALLOWED_NP_RANDOM = {"default_rng", "Generator", "SeedSequence", "PCG64", "BitGenerator"}


def _python_files(*roots):
    for root in roots:
        if root.exists():
            yield from sorted(root.rglob("*.py"))


def _global_rng_uses(tree):
    hits = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute):
            base = node.value
            if (
                base.attr == "random"
                and isinstance(base.value, ast.Name)
                and base.value.id in {"np", "numpy"}
                and node.attr not in ALLOWED_NP_RANDOM
            ):
                hits.append((node.lineno, f"np.random.{node.attr}"))
        if isinstance(node, ast.ImportFrom) and node.module in {"numpy.random", "random"}:
            bad = [a.name for a in node.names if a.name not in ALLOWED_NP_RANDOM]
            if bad:
                hits.append((node.lineno, f"from {node.module} import {', '.join(bad)}"))
        if isinstance(node, ast.Import) and any(a.name == "random" for a in node.names):
            hits.append((node.lineno, "import random"))
        if isinstance(node, ast.Attribute) and node.attr == "manual_seed":
            hits.append((node.lineno, "torch.manual_seed (global torch RNG)"))
    return hits


def test_scanner_catches_global_rng():
    bad = "import numpy as np\nimport random\nnp.random.seed(0)\nx = np.random.normal()\n"
    found = sorted(what for _, what in _global_rng_uses(ast.parse(bad)))
    assert found == ["import random", "np.random.normal", "np.random.seed"]
    ok = "import numpy as np\nrng = np.random.default_rng(np.random.SeedSequence(1))\n"
    assert _global_rng_uses(ast.parse(ok)) == []


def test_no_module_uses_the_global_rng():
    roots = [LIBRARY, *(ROOT / layer for layer in APP_LAYERS)]
    offenders = [
        f"{path.relative_to(ROOT)}:{line}: {what}"
        for path in _python_files(*roots)
        for line, what in _global_rng_uses(ast.parse(path.read_text(), str(path)))
    ]
    assert offenders == []


def test_privacy_code_leaves_global_numpy_state_alone():
    from fedpriv.privacy import (
        ExponentialMechanism,
        GaussianMechanism,
        LaplaceMechanism,
        PermuteAndFlip,
        PrivacyBudget,
        PrivacyLedger,
        audit_epsilon,
    )

    np.random.seed(12345)  # noqa: NPY002 - deliberately set the global state we watch
    before = np.random.get_state()[1].copy()  # noqa: NPY002
    rng = private_rng(0)
    ledger = PrivacyLedger(budget=PrivacyBudget(epsilon=50.0, delta=1e-5))
    ledger.release(GaussianMechanism(l2_sensitivity=1, noise_multiplier=2), [0.0], rng=rng)
    ledger.release(LaplaceMechanism(l1_sensitivity=1, epsilon=1), [0.0], rng=rng)
    ledger.release(ExponentialMechanism(epsilon=1), [0.0, 1.0], rng=rng)
    ledger.release(PermuteAndFlip(epsilon=1), [0.0, 1.0], rng=rng)
    audit_epsilon(lambda r: r.normal(), lambda r: r.normal(1), n_trials=200, delta=0, rng=rng)
    np.testing.assert_array_equal(np.random.get_state()[1], before)  # noqa: NPY002


def _imported_modules(path):
    tree = ast.parse(path.read_text(), str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module


def _layer(module: str) -> str:
    """The layer an import names: ``fedpriv.server.x`` → server, ``fedpriv.data`` → fedpriv
    (the application folders install as ``fedpriv.<folder>``)."""
    parts = module.split(".")
    if parts[0] == "fedpriv" and len(parts) > 1 and parts[1] in APP_LAYERS:
        return parts[1]
    return parts[0]


def _upward(path, allowed):
    return [
        f"{path.relative_to(ROOT)} imports {mod}"
        for mod in _imported_modules(path)
        if _layer(mod) in APP_LAYERS and _layer(mod) not in allowed
    ]


def test_the_import_scanner_sees_an_upward_import(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("from fedpriv.server.estimators import X\nimport fedpriv.clients.app\n")
    found = [m for m in _imported_modules(bad) if _layer(m) in APP_LAYERS]
    assert found == ["fedpriv.server.estimators", "fedpriv.clients.app"]


def test_library_never_imports_upward():
    offenders = [o for path in _python_files(LIBRARY) for o in _upward(path, set())]
    assert offenders == []


def test_application_layers_import_one_way():
    """experiments → server, strategies, clients → the library; never back up to experiments."""
    offenders = [
        o
        for layer in ("strategies", "clients", "server")
        for path in _python_files(ROOT / layer)
        for o in _upward(path, {"strategies", "clients", "server"})
    ]
    assert offenders == []


def test_layers_come_from_the_imported_tree():
    """fedpriv.server, .clients, .strategies, .experiments are the folders beside (or,
    installed, inside) the fedpriv that was imported, even when another checkout is
    installed editable in the same environment."""
    import fedpriv.clients
    import fedpriv.experiments
    import fedpriv.server
    import fedpriv.strategies

    import fedpriv

    package = Path(fedpriv.__file__).resolve().parent
    root = package if (package / "server").is_dir() else package.parent
    for layer in (fedpriv.server, fedpriv.clients, fedpriv.strategies, fedpriv.experiments):
        assert Path(layer.__file__).resolve().parent.parent == root, layer.__file__


def test_privacy_package_is_pure():
    offenders = [
        f"{path.relative_to(ROOT)} imports {mod}"
        for path in _python_files(LIBRARY / "privacy")
        for mod in _imported_modules(path)
        if mod.split(".")[0] in {"torch", "flwr", "opacus"} or mod.startswith("fedpriv.models")
    ]
    assert offenders == []
    # And at run time nothing heavy is pulled in transitively.
    code = (
        "import sys, fedpriv.privacy;"
        "bad=[m for m in sys.modules if m.split('.')[0] in ('torch','flwr','opacus')];"
        "print(bad); sys.exit(1 if bad else 0)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize(
    "args", [["check", "."], ["format", "--check", "."]], ids=["lint", "format"]
)
def test_ruff_is_clean(args):
    proc = subprocess.run(
        [sys.executable, "-m", "ruff", *args], cwd=ROOT, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def _ledger_calls(tree) -> list[tuple[int, str]]:
    """Calls of ``<...ledger>.release`` / ``.spend`` / ``.spend_instead`` (a ledger used
    directly, not through a release stage)."""
    hits = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        if node.func.attr not in {"release", "spend", "spend_instead"}:
            continue
        owner = node.func.value
        name = owner.attr if isinstance(owner, ast.Attribute) else getattr(owner, "id", "")
        if "ledger" in name.lower():
            hits.append((node.lineno, f"{name}.{node.func.attr}"))
    return hits


def test_the_ledger_scanner_sees_a_direct_release():
    code = "def f(self, m, v, rng):\n    return self._ledger.release(m, v, rng=rng)\n"
    assert _ledger_calls(ast.parse(code)) == [(2, "_ledger.release")]
    assert _ledger_calls(ast.parse("stage.release(v, label='x')")) == []


def test_strategies_release_through_one_stage():
    """Every strategy releases through fedpriv.privacy.release_stage (or GaussianRounds,
    which uses it): none draws, records or range-checks by hand."""
    offenders = [
        f"{path.relative_to(ROOT)}:{line} {call}"
        for path in _python_files(ROOT / "strategies")
        for line, call in _ledger_calls(ast.parse(path.read_text(), str(path)))
    ]
    assert offenders == []


def test_the_public_api_is_the_registry_and_importing_fedpriv_stays_light():
    code = (
        "import sys, fedpriv;"
        "heavy=[m for m in sys.modules if m.startswith(('fedpriv.server','torch','flwr'))];"
        "from fedpriv.methods import methods;"
        "names={m.estimator.split(':')[1] for m in methods()};"
        "ok=names <= set(fedpriv.__all__) and all(getattr(fedpriv, n).method for n in names);"
        "print(heavy, ok)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["[]", "True"]
