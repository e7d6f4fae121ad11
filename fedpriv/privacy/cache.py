"""A small memory + on-disk cache for accounting results keyed by exact inputs.

Accounting is a pure function of its inputs, so results are cached by a key
string that spells every input exactly (``repr`` of floats round-trips) and
the versions of the code that computed them. The disk layer is one JSON file
per namespace under ``$FEDPRIV_CACHE_DIR`` (default
``$XDG_CACHE_HOME/fedpriv`` or ``~/.cache/fedpriv``); set
``FEDPRIV_CACHE_DIR=off`` to keep the cache in memory only. Writes are atomic
(temp file + ``os.replace``), so concurrent runs may lose an entry but never
corrupt the file. Keys carry the version of the computing code and of
dp-accounting, so a change to either starts a fresh cache.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

try:  # dp-accounting exposes no __version__; the installed metadata does.
    from importlib.metadata import version as _pkg_version

    DP_ACCOUNTING_VERSION = _pkg_version("dp-accounting")
except Exception:  # pragma: no cover - metadata missing in odd installs
    DP_ACCOUNTING_VERSION = "unknown"


def cache_dir() -> Path | None:
    """Directory of the disk cache, or ``None`` when disk caching is off."""
    env = os.environ.get("FEDPRIV_CACHE_DIR")
    if env is not None:
        if env.strip().lower() in {"", "off", "0", "none"}:
            return None
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "fedpriv"


class JsonCache:
    """Memory + JSON-file cache for one namespace (e.g. ``"calibration"``)."""

    def __init__(self, namespace: str, *, version: str, persist: bool = True) -> None:
        """``persist=False`` keeps the namespace in memory only (cheap results)."""
        self._namespace = namespace
        self._persist = persist
        self._prefix = f"{version}|dp-accounting={DP_ACCOUNTING_VERSION}|"
        self._memory: dict[str, Any] = {}
        self._loaded_from: Path | None = None

    def _path(self) -> Path | None:
        d = cache_dir() if self._persist else None
        return None if d is None else d / f"{self._namespace}.json"

    def _load(self, path: Path) -> dict[str, Any]:
        try:
            with open(path, encoding="utf-8") as fh:
                data = json.load(fh)
            return data if isinstance(data, dict) else {}
        except (OSError, ValueError):
            return {}

    def get(self, key: str) -> Any | None:
        full = self._prefix + key
        if full in self._memory:
            return self._memory[full]
        path = self._path()
        if path is None or not path.exists():
            return None
        if self._loaded_from != path:
            self._memory.update(self._load(path))
            self._loaded_from = path
        return self._memory.get(full)

    def set(self, key: str, value: Any) -> None:
        full = self._prefix + key
        self._memory[full] = value
        path = self._path()
        if path is None:
            return
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            on_disk = self._load(path) if path.exists() else {}
            on_disk[full] = value
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{self._namespace}.")
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                json.dump(on_disk, fh)
            os.replace(tmp, path)
        except OSError:
            # A read-only home must not break a run; the memory layer still works.
            pass

    def clear_memory(self) -> None:
        """Forget the memory layer (tests use this to measure the disk layer)."""
        self._memory.clear()
        self._loaded_from = None
