"""The Flower App that every launcher runs: a generated project, without code.

``flwr run DIR`` needs a project directory whose ``pyproject.toml`` names the
ServerApp and ClientApp and lists every run-config key (Flower refuses a key
the project does not declare). fedpriv writes that project from the code
instead of keeping it by hand:

* the components are the installed ``fedpriv.server.app:app`` and
  ``fedpriv.clients.app:app``;
* the keys are :meth:`fedpriv.federation.settings.RunSettings.all_keys`: the
  run's own and every registered method's, plugins included (a plugin's keys
  reach ``flwr run`` by its registration alone), each ``""`` (its default,
  stated once in the code);
* the bundle (FAB) carries no Python: every SuperNode runs the fedpriv it
  has installed itself, never code shipped by a coordinator (a hospital's node
  trusts no coordinator), and a wheel install works as a checkout does.

:func:`app_dir` writes the project once per distinct content (the directory
name carries its hash) under fedpriv's cache directory, or a private temporary
directory when the cache is off; ``fedpriv app DIR`` writes it where a user
wants to call ``flwr run`` themselves.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path

import fedpriv
from fedpriv.atomic import write_text_atomic

#: The ServerApp and ClientApp the project names.
COMPONENTS = {"serverapp": "fedpriv.server.app:app", "clientapp": "fedpriv.clients.app:app"}


def run_config_keys() -> list[str]:
    """Every run-config key (kebab-case), the run's first, then each method's."""
    from fedpriv.federation.settings import RunSettings

    return [k.replace("_", "-") for k in RunSettings.all_keys()]


def default_config() -> dict[str, str]:
    """Every run-config key with ``""`` (its default), as the project declares them."""
    return dict.fromkeys(run_config_keys(), "")


def project_toml() -> str:
    """The project's ``pyproject.toml``."""
    lines = [
        "# Written by fedpriv (fedpriv app): the Flower App of fedpriv's launchers.",
        "# Every key's default is stated once in fedpriv's code; \"\" means that default.",
        "[build-system]",
        'requires = ["hatchling"]',
        'build-backend = "hatchling.build"',
        "",
        "[project]",
        'name = "fedpriv-app"',
        f'version = "{fedpriv.__version__}"',
        'description = "fedpriv\'s Flower App: a strategy and its clients under record-level DP"',
        'license = "Apache-2.0"',
        # The nodes' own fedpriv runs the app: nothing is installed from the bundle.
        "dependencies = []",
        "",
        "[tool.flwr.app]",
        'publisher = "fedpriv"',
        "",
        "[tool.flwr.app.components]",
        *(f"{k} = {json.dumps(v)}" for k, v in COMPONENTS.items()),
        "",
        "[tool.flwr.app.config]",
        *(f'{k} = ""' for k in run_config_keys()),
        "",
    ]
    return "\n".join(lines)


def write_project(directory: str | os.PathLike[str]) -> Path:
    """Write the project into ``directory`` (created if need be); returns its path."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    write_text_atomic(out / "pyproject.toml", project_toml())
    return out


def app_dir() -> Path:
    """A directory holding the current project (module docstring)."""
    from fedpriv.privacy.cache import cache_dir

    text = project_toml()
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    base = cache_dir()
    if base is None:
        base = Path(tempfile.mkdtemp(prefix="fedpriv-app-"))
    out = base / f"flower-app-{digest}"
    project = out / "pyproject.toml"
    if not (project.is_file() and project.read_text(encoding="utf-8") == text):
        write_project(out)
    return out
