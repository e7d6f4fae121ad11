"""The harness of the bad-input table (``tests/cli/test_bad_inputs.py``): the ward table's
files, the command lines, spoiled models, failing disks, and the checks a row makes of
its folder afterwards."""

from __future__ import annotations

import errno
import gzip
import json
import os
import pickle
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from fedpriv.server import cli_run

from tests.data.ward_table import HEADER, SCHEMA, _rows  # one ward table for both

MODEL = "model.fedpriv.npz"


def _dir(path: Path) -> str:
    path.mkdir(parents=True)
    return str(path)


def _file(path: Path, content: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    (path.write_bytes if isinstance(content, bytes) else path.write_text)(content)
    return path


def _csv(t: Path, content: str | bytes = HEADER + _rows(), name: str = "ward.csv") -> str:
    return str(_file(t / name, content))


def _schema(t: Path, old: str = "", new: str = "") -> str:
    assert old in SCHEMA
    return str(_file(t / "ward.toml", SCHEMA.replace(old, new, 1)))


def _run(t: Path, *more: str, csv: str | None = None) -> list[str]:
    """``fedpriv run`` on the ward CSV, one boosting round unless ``more`` says otherwise."""
    return ["run", "--csv", csv or _csv(t), "--schema", _schema(t), "--set", "rounds=1", *more]


def _method(t: Path, method: str, *sets: str) -> list[str]:
    argv = ["run", "--method", method, "--csv", _csv(t), "--schema", _schema(t)]
    for s in sets:
        argv += ["--set", s]
    return argv


# -- model files: the earlier run, and what can go wrong with its file ---------------------
def _earlier(t: Path) -> Path:
    return t / "earlier"


def _model(t: Path, kind: str) -> str:
    """The earlier run's model file, spoiled as ``kind`` says."""
    good = (_earlier(t) / MODEL).read_bytes()
    path = t / "spoiled" / MODEL
    if kind == "truncated":
        data = good[: len(good) // 2]
    elif kind == "bit-flipped":
        data = bytearray(good)
        data[len(data) // 2] ^= 0x10
        data = bytes(data)
    elif kind == "empty":
        data = b""
    elif kind == "pickled":
        data = pickle.dumps({"model": np.zeros(3)})
    elif kind == "text":
        data = "score\n0.5\n"
    else:  # "edited-meta" / "edited-array": rewritten by hand, checksums left as they were
        with np.load(_earlier(t) / MODEL, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
        if kind == "edited-meta":  # the card's method changed by hand
            meta = str(arrays["__meta__"][()])
            arrays["__meta__"] = np.array(meta.replace('"boosting"', '"logistic"'))
        else:
            name = next(k for k in arrays if k.startswith("model.") and arrays[k].size)
            arrays[name] = arrays[name] + 1
        path.parent.mkdir(parents=True, exist_ok=True)
        np.savez(path, **arrays)
        return str(path)
    return str(_file(path, data))


SPOILED = {  # kind -> what the loader says
    "truncated": r"\.npz: refused: File is not a zip file",
    "bit-flipped": r"\.npz: refused: Bad CRC-32",
    "empty": r"\.npz: not a fedpriv model file \(an \.npz zip\); nothing was unpickled",
    "pickled": r"\.npz: not a fedpriv model file \(an \.npz zip\); nothing was unpickled",
    "text": r"\.npz: not a fedpriv model file \(an \.npz zip\); nothing was unpickled",
    "edited-meta": r"\.npz: the metadata's checksum does not match: the file was modified",
    "edited-array": r"\.npz: array 'model\.\w+' does not match its manifest entry",
}


# -- a node's state folder -------------------------------------------------------------
def _ledger(t: Path, text: str) -> str:
    from fedpriv.privacy.node_budget import LEDGER_FILE

    _file(t / "node-0" / LEDGER_FILE, text)
    return str(t / "node-0")


# -- simulated environments ------------------------------------------------------------
def _read_only(t: Path, mp: pytest.MonkeyPatch) -> None:
    """``t/ro`` read-only (chmod 555; for root, who writes anyway, ``os.access`` says no)."""
    ro = t / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    real = os.access
    mp.setattr(os, "access", lambda p, mode, **kw: Path(p) != ro and real(p, mode, **kw))


def _full_disk(t: Path, mp: pytest.MonkeyPatch) -> None:
    """The disk fills while the results are written: 16 KiB go down, then ENOSPC."""
    real_write, real_results = os.write, cli_run._write_results
    room = [16 * 1024]

    def write(fd, data):
        n = min(len(data), room[0])
        if n == 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        room[0] -= n
        return real_write(fd, bytes(data[:n]))

    def results(*args, **kwargs):
        mp.setattr(os, "write", write)
        return real_results(*args, **kwargs)

    mp.setattr(cli_run, "_write_results", results)


# -- checks after a row -----------------------------------------------------------------
def _unchanged(t: Path, trained: Path) -> None:
    """The earlier run's files are byte for byte what it wrote; no temporary file."""
    for name in (MODEL, "privacy.json"):
        assert (_earlier(t) / name).read_bytes() == (trained / name).read_bytes(), name
    _no_leftovers(t)


def _replaced(t: Path, trained: Path) -> None:
    assert (_earlier(t) / MODEL).read_bytes() != (trained / MODEL).read_bytes()
    assert json.loads((_earlier(t) / "privacy.json").read_text())["run"]["status"] == "completed"
    _no_leftovers(t)


def _no_leftovers(t: Path, *_: object) -> None:
    hidden = [p for p in t.rglob(".*")]
    assert not hidden, hidden  # no .tmp file, no staging folder


def _nothing_made(t: Path, *_: object) -> None:
    assert not (t / "new").exists()
    _no_leftovers(t)


def _failed_run_recorded(t: Path, *_: object) -> None:
    privacy = json.loads((t / "failed" / "privacy.json").read_text())
    assert privacy["run"]["status"] == "failed" and "round 0" in privacy["run"]["reason"]
    assert not (t / "failed" / MODEL).exists()


def _failed_run_replaced(t: Path, *_: object) -> None:
    """--force over an earlier run with a failed one: its privacy.json, and no earlier
    model left beside it to pass for this run's."""
    assert json.loads((_earlier(t) / "privacy.json").read_text())["run"]["status"] == "failed"
    assert not (_earlier(t) / MODEL).exists()
    _no_leftovers(t)


def _warnings_kept(t: Path, *_: object) -> None:
    (line,) = json.loads((t / "out" / "privacy.json").read_text())["run"]["warnings"]
    assert "column 'age': 3 of 203 values clipped to [18, 100] (3 above)" in line


@dataclass(frozen=True)
class Row:
    argv: Callable[[Path], list[str]]
    code: int  # 0 a correct run, 1 a failed run, 2 a refusal
    says: str  # regex the output must match
    setup: Callable[[Path, pytest.MonkeyPatch], None] | None = None
    check: Callable[..., None] | None = None  # (tmp, trained run folder)


_GZIP = gzip.compress((HEADER + _rows(2000)).encode())


def _clipped(t: Path) -> str:
    return _csv(t, HEADER + _rows() + "150,a,1\n151,b,0\n152,a,1\n")
