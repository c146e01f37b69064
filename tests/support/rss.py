"""Resident memory of a live server's processes, read from ``/proc`` (Linux)."""

from __future__ import annotations

import threading
from pathlib import Path

PROC = Path("/proc")


def process_tree(pid: int) -> list[int]:
    """``pid`` and all its descendants."""
    children: dict[int, list[int]] = {}
    for entry in PROC.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:  # exited meanwhile
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])  # the name in parentheses may hold spaces
        children.setdefault(parent, []).append(int(entry.name))
    found, stack = [], [pid]
    while stack:
        current = stack.pop()
        found.append(current)
        stack.extend(children.get(current, ()))
    return found


def status_kib(pid: int, field: str) -> int:
    """A ``kB`` field of ``/proc/<pid>/status`` (``VmRSS``, ``VmHWM``); 0 once the process is gone."""
    try:
        for line in (PROC / str(pid) / "status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


class RssGrowth:
    """How much the resident memory of ``pids`` grows while a ``with`` block
    runs: VmRSS sampled every ``interval`` seconds in a thread, and each
    process's peak (VmHWM), so that a spike between samples counts too.
    ``mib`` is the sum over the processes of the larger of the two growths."""

    def __init__(self, pids: list[int], interval: float = 0.005):
        self.pids = list(pids)
        self.interval = interval
        self.mib = 0.0
        self._stop = threading.Event()
        self._peaks: dict[int, int] = {}
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.wait(self.interval):
            for pid in self.pids:
                self._peaks[pid] = max(self._peaks[pid], status_kib(pid, "VmRSS"))

    def __enter__(self) -> RssGrowth:
        self._rss = {pid: status_kib(pid, "VmRSS") for pid in self.pids}
        self._hwm = {pid: status_kib(pid, "VmHWM") for pid in self.pids}
        self._peaks = dict(self._rss)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        total = 0
        for pid in self.pids:
            sampled = self._peaks[pid] - self._rss[pid]
            peak = status_kib(pid, "VmHWM") - self._hwm[pid]
            total += max(sampled, peak, 0)
        self.mib = total / 1024
