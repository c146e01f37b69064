"""The machine-wide change beacon and a registry that follows it."""

from __future__ import annotations

import asyncio
import multiprocessing
import threading

from inference.serving.changes import ChangeBeacon
from inference.serving.registry import ModelRegistry


def _bump_many(path: str, times: int) -> None:
    beacon = ChangeBeacon(path)
    for _ in range(times):
        beacon.bump()


def test_bumps_from_several_processes_all_count(tmp_path):
    path = tmp_path / "run" / "registry.changes"
    reader = ChangeBeacon(path)
    assert reader.read() == 0
    processes = [
        multiprocessing.get_context("spawn").Process(target=_bump_many, args=(str(path), 200)) for _ in range(3)
    ]
    for p in processes:
        p.start()
    for p in processes:
        p.join(30)
    assert reader.read() == 600  # no lost update, and the reader's mapping sees the other processes' writes


class _Source:
    """A registry source (inference.ports.RegistrySource) that counts its reads."""

    def __init__(self, on_load=None):
        self.loads = 0
        self.counter = 0
        self.on_load = on_load

    def models(self, names=None):
        self.loads += 1
        if self.on_load:
            self.on_load()
        return []

    def stamp(self):
        return self.counter

    def changed(self, after, upto):
        return None  # not known: every rebuild reads every model

    def subscribe(self, callback):
        pass

    def unsubscribe(self, callback):
        pass

    def done(self):
        pass


def test_registry_rebuilds_before_a_lookup_once_the_beacon_moved(tmp_path):
    beacon = ChangeBeacon(tmp_path / "b")
    rows = _Source()
    registry = ModelRegistry(rows, poll_seconds=0, beacon=beacon)
    registry.start()
    assert rows.loads == 1
    registry.models  # noqa: B018  (a lookup)
    assert rows.loads == 1  # nothing moved: no query
    rows.counter = 1
    ChangeBeacon(tmp_path / "b").bump()  # another process committed a change
    assert registry.models == {} and rows.loads == 2  # rebuilt before answering
    registry.models  # noqa: B018
    assert rows.loads == 2


def test_registry_follows_the_beacon_from_an_event_loop(tmp_path):
    """On a loop's thread the rebuild runs in another thread (Django forbids
    queries there), and the lookup still answers after it."""

    beacon = ChangeBeacon(tmp_path / "b")
    threads = []
    rows = _Source(on_load=lambda: threads.append(threading.current_thread().name))
    registry = ModelRegistry(rows, poll_seconds=0, beacon=beacon)
    registry.start()
    rows.counter = 1
    beacon.bump()

    async def lookup():
        return registry.models

    answers = []  # a thread of its own: other tests (Playwright) may leave a loop running in this one
    thread = threading.Thread(target=lambda: answers.append(asyncio.run(lookup())))
    thread.start()
    thread.join(30)
    assert answers == [{}]
    assert rows.loads == 2 and threads[-1].startswith("registry-follow")
