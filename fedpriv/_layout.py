"""The application folders of a source tree as subpackages of ``fedpriv``.

A checkout keeps the user's layout: ``fedpriv/`` (the library) beside
``server/``, ``clients/``, ``strategies/`` and ``experiments/``. Installed from a
wheel, setuptools places those folders inside the package (``package-dir`` in
``pyproject.toml``), so the only top-level import name is ``fedpriv``. Run from
the checkout itself, or from a Flower App bundle (a FAB carries the same
folders, and Flower puts its directory first on ``sys.path``), the folders
stay siblings: :func:`install` adds one import finder that maps exactly the
four names ``fedpriv.server``, ``fedpriv.clients``, ``fedpriv.strategies`` and
``fedpriv.experiments`` to them, and nothing else.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
from pathlib import Path

LAYERS = ("server", "clients", "strategies", "experiments")


class _LayerFinder(importlib.abc.MetaPathFinder):
    """Finds ``fedpriv.<layer>`` in ``root/<layer>`` (deeper modules follow its ``__path__``)."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def find_spec(self, fullname, path=None, target=None):
        prefix, _, layer = fullname.partition(".")
        if prefix != "fedpriv" or layer not in LAYERS:
            return None
        init = self.root / layer / "__init__.py"
        if not init.is_file():
            return None
        return importlib.util.spec_from_file_location(
            fullname, init, submodule_search_locations=[str(init.parent)]
        )

    def __repr__(self) -> str:
        return f"fedpriv layer finder ({self.root})"


def install(package_dir: Path) -> None:
    """Map the sibling folders of ``package_dir`` when fedpriv runs from a source tree.

    Installed (the folders inside the package) or without a ``fedpriv``
    project beside it, nothing is added. Idempotent per root.
    """
    here = package_dir.resolve()
    if (here / "server").is_dir():
        return  # an installed wheel: the layers are real subpackages
    root = here.parent
    project = root / "pyproject.toml"
    try:
        declares = 'name = "fedpriv"' in project.read_text(encoding="utf-8")
    except OSError:
        declares = False
    if not declares:
        return
    if any(isinstance(f, _LayerFinder) and f.root == root for f in sys.meta_path):
        return
    # First: an editable install of another checkout maps the same names to its own
    # folders, and the layers must come from the tree this ``fedpriv`` was imported from.
    sys.meta_path.insert(0, _LayerFinder(root))
