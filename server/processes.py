"""Processes a launcher starts, and how it stops them: by PID, never by name.

:class:`ProcessTracker` remembers a process tree (PID and start time, so a
recycled PID is never signalled); :func:`stop_trees` stops several trees at
once, SIGTERM then SIGKILL on shared deadlines. Used by :mod:`fedpriv.server.simulate`
and :mod:`fedpriv.server.local_federation`.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path


def _descendants(pid: int) -> list[int]:
    out, stack = [], [pid]
    while stack:
        p = stack.pop()
        try:
            for task in os.listdir(f"/proc/{p}/task"):
                kids = Path(f"/proc/{p}/task/{task}/children").read_text().split()
                for k in map(int, kids):
                    if k not in out:
                        out.append(k)
                        stack.append(k)
        except OSError:
            pass
    return out


def _start_time(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


class ProcessTracker:
    """Remembers (pid, start time) of a process tree so it can be stopped by PID later."""

    def __init__(self, root: int) -> None:
        self.root, self.known = root, {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def snapshot(self) -> None:
        for p in [self.root, *_descendants(self.root)]:
            st = _start_time(p)
            if st is not None:
                self.known.setdefault(p, st)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.snapshot()
            self._stop.wait(0.5)

    def alive(self) -> list[int]:
        out = []
        for p, st in self.known.items():
            try:
                fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if fields[19] == st and fields[0] != "Z":
                out.append(p)
        return out

    def stop_all(self, proc: subprocess.Popen) -> list[int]:
        """Stop ``proc`` and its tree; returns PIDs still alive (none)."""
        return stop_trees([(self, proc)])


def stop_trees(
    trees: list[tuple[ProcessTracker, subprocess.Popen]],
    *,
    grace: float = 15.0,
    follow: float = 10.0,
) -> list[int]:
    """Stop several process trees at once, by PID; returns PIDs still alive (none).

    Every root gets SIGTERM together and all share one ``grace`` deadline (then
    SIGKILL); then their descendants still alive (SuperExecs, ClientApps) get
    SIGTERM and share one ``follow`` deadline, then SIGKILL. Stopping the
    trees together costs the slowest one's shutdown, not the sum.
    """
    for tracker, _ in trees:
        tracker.snapshot()
        tracker._stop.set()
    for tracker, _ in trees:
        tracker._thread.join(timeout=2)
        tracker.snapshot()  # children started meanwhile
    for _, proc in trees:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + grace
    for _, proc in trees:
        try:
            proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)

    def alive() -> list[int]:
        return [p for tracker, _ in trees for p in tracker.alive()]

    # The roots are gone; their SuperExecs would notice within seconds (after
    # retrying their parent's API): ask them by PID now, with the same signal.
    for p in alive():
        try:
            os.kill(p, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + follow
    while alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    for p in alive():  # Ray agents can outlive a stopped run
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + 2.0  # SIGKILL is asynchronous: wait until they are gone
    while (left := alive()) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
