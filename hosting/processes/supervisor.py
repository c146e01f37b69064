"""Run several server processes as one: ``manage.py serve`` uses it for the
REST (granian) and gRPC processes.

SIGTERM/SIGINT stop every child: SIGTERM, then, after a grace period,
SIGKILL to the child's process group. Each child runs in a process group of
its own, so that a terminal's Ctrl-C (SIGINT to the whole foreground group)
reaches only this process, which then stops the children in order (granian's
workers that got the terminal's SIGINT as well as their parent's SIGTERM hung
until they were killed), and so that the SIGKILL after the grace period
reaches a child's own children too (granian's workers: ``serve`` leaves
granian's ``--workers-kill-timeout`` off, see there).
A child that dies on its own is restarted, unless it died ``max_restarts``
times within ``window`` seconds: then everything stops and :meth:`run`
returns 1, so that the outer supervisor (systemd, Docker, Kubernetes) sees
the failure.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import time
from dataclasses import dataclass, field

logger = logging.getLogger(__name__)


@dataclass
class Child:
    name: str
    argv: list[str]
    env: dict
    cwd: str
    process: subprocess.Popen | None = None
    deaths: list[float] = field(default_factory=list)

    def start(self) -> None:
        self.process = subprocess.Popen(self.argv, env=self.env, cwd=self.cwd, process_group=0)
        logger.info("started %s (pid %s)", self.name, self.process.pid)


class Supervisor:
    def __init__(
        self,
        children: list[Child],
        max_restarts: int = 5,
        window: float = 60.0,
        grace: float = 25.0,
        on_exit=None,
    ):
        """``on_exit(pid)`` runs after a child process ends (e.g. metrics cleanup)."""
        self.children = children
        self.on_exit = on_exit
        self.max_restarts = max_restarts
        self.window = window
        self.grace = grace
        self._stopping = False

    def _stop(self, signum, frame) -> None:
        logger.info("received %s; stopping %s", signal.Signals(signum).name, ", ".join(c.name for c in self.children))
        self._stopping = True

    def run(self) -> int:
        signal.signal(signal.SIGTERM, self._stop)
        signal.signal(signal.SIGINT, self._stop)
        for child in self.children:
            child.start()
        status = 0
        while not self._stopping:
            time.sleep(0.2)
            for child in self.children:
                code = child.process.poll()
                if code is None or self._stopping:
                    continue
                if self.on_exit:
                    self.on_exit(child.process.pid)
                now = time.monotonic()
                child.deaths = [t for t in child.deaths if now - t < self.window] + [now]
                if len(child.deaths) > self.max_restarts:
                    logger.error("%s exited with %s too often; stopping", child.name, code)
                    self._stopping, status = True, 1
                    break
                logger.warning("%s exited with %s; restarting", child.name, code)
                child.start()
        self._terminate()
        return status

    def _terminate(self) -> None:
        alive = [c.process for c in self.children if c.process and c.process.poll() is None]
        for process in alive:
            process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + self.grace
        for process in alive:
            try:
                process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:  # the child and whatever it started (granian's workers)
                try:
                    os.killpg(process.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                process.wait()
