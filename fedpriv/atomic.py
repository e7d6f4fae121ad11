"""Crash-safe file writes: a reader sees the old file or the new one, never a torn one.

A results file rewritten during a run (the privacy journal, the run status)
must survive the process dying at any instant: the bytes go to a temporary
file in the same directory, are fsync'd, and replace the target with
:func:`os.replace` (atomic on POSIX within one file system); the directory is
then fsync'd so that the rename itself is durable. A write that fails (a full
disk, a read-only folder) removes its temporary file and leaves the target as
it was. :func:`staged` does the same for several files that belong together
(a model file and its privacy report).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


def _fill(fd: int, data: bytes) -> None:
    """All of ``data`` into ``fd`` (``os.write`` may write less than asked), then fsync."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
    os.fsync(fd)


def _fsync_dir(directory: Path) -> None:
    # A rename is durable only once the directory entry is on disk.
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def write_bytes_atomic(path: str | os.PathLike[str], data: bytes) -> Path:
    """Replace ``path`` by a file holding ``data``, atomically and durably; returns it.

    On any failure the temporary file is removed and ``path`` is unchanged.
    """
    target = Path(path)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        try:
            _fill(fd, data)
        finally:
            os.close(fd)
        os.replace(tmp, target)
    except BaseException as exc:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(exc, OSError) and exc.filename is None:
            exc.filename = str(target)  # os.write names no file: the one being written
        raise
    _fsync_dir(target.parent)
    return target


def write_text_atomic(path: str | os.PathLike[str], text: str) -> None:
    """Replace ``path`` by a file holding ``text`` (UTF-8), atomically and durably."""
    write_bytes_atomic(path, text.encode("utf-8"))


@contextmanager
def staged(directory: str | os.PathLike[str]) -> Iterator[Path]:
    """A temporary folder inside ``directory``: the files written there replace
    ``directory``'s files of the same names when the block ends, none if it raises.

    The folder is removed either way, so a failed write (a full disk) leaves
    neither a partial file nor a temporary one, and an earlier file of the same
    name unchanged. The files are moved one rename each (atomic per file).
    """
    base = Path(directory)
    stage = Path(tempfile.mkdtemp(dir=base, prefix=".staged-"))
    try:
        yield stage
        for f in sorted(stage.iterdir()):
            os.replace(f, base / f.name)
        _fsync_dir(base)
    finally:
        shutil.rmtree(stage, ignore_errors=True)


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
