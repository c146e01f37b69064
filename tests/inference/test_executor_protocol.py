"""Both executors implement the data plane's executor port
(inference/executor.py): every member the protocol declares, with its
parameters in order and its defaults; a remote executor also the worker
calls. The data plane calls them without probing, so a missing or renamed
member would fail a request, not start-up."""

from __future__ import annotations

import inspect

import pytest

from inference.executor import Executor, WorkerExecutor
from inference.runtime.executors import InProcessExecutor
from inference.workers.client.executor import RemoteExecutor


def _members(protocol) -> dict:
    """The protocol's declared methods (own and inherited) and attributes."""
    members: dict = {}
    for cls in reversed(protocol.__mro__):
        if cls in (Executor, WorkerExecutor):
            members.update({n: v for n, v in vars(cls).items() if inspect.isfunction(v) and not n.startswith("_")})
            members.update({name: bool for name in vars(cls).get("__annotations__", {})})
    return members


def _parameters(function) -> list[tuple[str, object]]:
    return [(p.name, p.default) for p in inspect.signature(function).parameters.values()][1:]  # without self


@pytest.mark.parametrize(
    ("implementation", "protocol", "remote"),
    [(InProcessExecutor, Executor, False), (RemoteExecutor, WorkerExecutor, True)],
)
def test_the_executors_implement_their_protocol(implementation, protocol, remote):
    members = _members(protocol)
    assert {"remote", "start", "on_snapshot", "gpus", "seats", "blocks", "run"} <= set(members)
    assert implementation.remote is remote
    for name, declared in members.items():
        if declared is bool:
            continue
        actual = getattr(implementation, name)
        assert inspect.iscoroutinefunction(actual) == inspect.iscoroutinefunction(declared), name
        given = _parameters(actual)
        names = [n for n, _ in given]
        wanted = _parameters(declared)
        assert all(n in names for n, _ in wanted), (name, wanted, given)
        assert [n for n in names if n in dict(wanted)] == [n for n, _ in wanted], (name, "order")
        defaults = dict(given)
        assert all(defaults[n] == d for n, d in wanted), (name, wanted, given)


def test_only_a_remote_executor_has_the_worker_calls():
    worker_only = set(_members(WorkerExecutor)) - set(_members(Executor))
    assert worker_only == {"run_async", "segment_workers", "run_segment"}
    assert not any(hasattr(InProcessExecutor, name) for name in worker_only)
