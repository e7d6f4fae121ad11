"""fedpriv.privacy's lazy name table: complete, one entry per name, each at its definition."""

import ast
import importlib
import subprocess
import sys
from collections import Counter
from pathlib import Path

import fedpriv.privacy as privacy

INIT = Path(privacy.__file__)


def test_each_name_is_listed_once_under_the_module_that_defines_it():
    listed = Counter(name for names in privacy._SOURCES.values() for name in names)
    assert [name for name, n in listed.items() if n > 1] == []
    wrong = []
    for module, names in privacy._SOURCES.items():
        mod = importlib.import_module(f"fedpriv.privacy.{module}")
        for name in names:
            where = getattr(getattr(mod, name), "__module__", None)
            if where != mod.__name__:
                wrong.append(f"{name}: listed under {module}, defined in {where}")
    assert wrong == []


def test_table_all_and_type_checking_imports_agree():
    static = {}
    for node in ast.walk(ast.parse(INIT.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module.startswith("fedpriv.privacy."):
            for alias in node.names:
                static[alias.name] = node.module.removeprefix("fedpriv.privacy.")
    assert static == privacy._WHERE
    assert sorted(privacy.__all__) == sorted(privacy._WHERE)


def test_every_public_name_resolves():
    for name in privacy.__all__:
        assert getattr(privacy, name) is not None


def test_a_submodule_import_does_not_load_the_accountant():
    # What the ClientApp imports (fedpriv.privacy.randomness) must not pull in
    # dp_accounting or scipy through this package's __init__.
    code = (
        "import sys, fedpriv.privacy.randomness; "
        "print(sorted(m for m in ('dp_accounting', 'scipy') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
