"""Crash-safe file writes: a reader sees the old file or the new one, never a torn one.

A results file rewritten during a run (the privacy journal, the run status)
must survive the process dying at any instant: the text goes to a temporary
file in the same directory, is fsync'd, and replaces the target with
:func:`os.replace` (atomic on POSIX within one file system); the directory is
then fsync'd so that the rename itself is durable.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any


def write_text_atomic(path: str | os.PathLike[str], text: str) -> None:
    """Replace ``path`` by a file holding ``text``, atomically and durably."""
    target = Path(path)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    # The rename is durable only once the directory entry is on disk.
    dir_fd = os.open(target.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def write_json_atomic(path: str | os.PathLike[str], data: Any) -> None:
    """``data`` as indented JSON at ``path`` (:func:`write_text_atomic`)."""
    write_text_atomic(path, json.dumps(data, indent=1))


def point_latest(directory: str | os.PathLike[str], name: str) -> Path | None:
    """Point ``<directory>/latest`` at its entry ``name`` (a relative symlink).

    The link is made under a temporary name and renamed over ``latest``, so a
    reader follows the old target or the new one. Returns the link, or
    ``None`` with nothing changed when ``latest`` exists but is not a symlink
    (never replaced) or the file system makes none.
    """
    base = Path(directory)
    link = base / "latest"
    if link.exists() and not link.is_symlink():
        return None
    tmp = base / f".latest.{os.getpid()}.tmp"
    try:
        tmp.unlink(missing_ok=True)
        os.symlink(name, tmp)
        os.replace(tmp, link)
    except OSError:
        tmp.unlink(missing_ok=True)
        return None
    return link
