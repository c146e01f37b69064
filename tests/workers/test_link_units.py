"""Units of the worker link's budgets: a front-end process's pool of
connections to a worker (real sockets, a thread and an event loop waiting
for them) and a worker's handshake and per-front-end budgets."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from types import SimpleNamespace

import pytest

from inference.workers import frames, messages
from inference.workers.client.connections import Connection
from inference.workers.client.pool import ConnectionPool
from inference.workers.placement import Worker
from inference.workers.server.admission import Admission, Limits

WORKER = Worker("w-1", "infer.cpu", None, messages.Announcement("cpu"))


def _connection() -> tuple[Connection, socket.socket]:
    """A Connection to WORKER over a socket pair, and the worker's end."""
    front, back = socket.socketpair()
    return Connection(front, WORKER, 1 << 20), back


def test_the_pool_never_opens_more_than_its_cap_and_serves_waiters_in_order():
    pool = ConnectionPool(2, idle_seconds=60)
    assert pool.take(WORKER) is WORKER and pool.take(WORKER) is WORKER  # two places to open a connection
    assert pool.take(WORKER) is None and pool.open_count("w-1") == 2
    first, second = pool.wait(WORKER), pool.wait(WORKER)
    served = []
    thread = threading.Thread(target=lambda: served.append(first.wait(5)))
    thread.start()
    conn, peer = _connection()
    pool.give(conn)  # goes to the first waiter, not to the idle list
    thread.join(5)
    assert served == [True] and first.grant is conn and second.grant is None
    assert pool.take(WORKER) is None  # still two open: the third request keeps waiting

    async def wait_on_a_loop():
        return await second.wait_async(5)

    def close_one():
        time.sleep(0.1)
        pool.release(WORKER)  # a connection closed: its place goes to the waiter on the loop

    threading.Thread(target=close_one).start()
    assert asyncio.run(wait_on_a_loop()) is True and second.grant is WORKER
    assert pool.open_count("w-1") == 2
    peer.close()


def test_a_waiter_that_gives_up_passes_on_what_it_was_granted():
    pool = ConnectionPool(1, idle_seconds=60)
    assert pool.take(WORKER) is WORKER
    late, next_in_line = pool.wait(WORKER), pool.wait(WORKER)
    conn, peer = _connection()
    pool.give(conn)  # granted to ``late`` ...
    pool.cancel(late)  # ... which gave up meanwhile: the next one gets it
    assert next_in_line.grant is conn and late.grant is None
    pool.cancel(next_in_line)  # gives it back: idle now
    assert pool.take(WORKER) is conn
    peer.close()


def test_the_sweep_closes_idle_connections_and_hears_a_worker_draining():
    drained = []
    pool = ConnectionPool(4, idle_seconds=0.3, on_draining=drained.append)
    pairs = [_connection() for _ in range(3)]
    assert all(pool.take(WORKER) is WORKER for _ in pairs)
    for conn, _ in pairs:
        pool.give(conn)
    (stale, _), (_, closed_peer), (_, told_peer) = pairs
    stale.used -= 1.0  # idle longer than idle_seconds
    closed_peer.close()  # the worker closed it
    frames.send(told_peer, frames.encode(messages.Draining("w-1")))  # the worker drains
    pool.sweep()
    assert drained == ["w-1"]
    assert pool.open_count("w-1") == 0
    assert all(conn.sock.fileno() == -1 for conn, _ in pairs)


def test_a_pooled_connection_with_bytes_after_its_answer_is_not_reused():
    pool = ConnectionPool(2, idle_seconds=60)
    conn, peer = _connection()
    assert pool.take(WORKER) is WORKER
    answer = frames.encode(messages.RunAnswer(1, True, 0, 0)) + frames.encode(messages.Draining("w-1"))
    peer.sendall(b"".join(bytes(b) for b in answer))  # the answer, then Draining: one read takes both
    assert isinstance(conn.reader.frame()[0], messages.RunAnswer)
    pool.give(conn)
    assert pool.take(WORKER) is WORKER  # not the connection: a new one may be opened
    assert conn.sock.fileno() == -1
    peer.close()


def _record(peer: str, started: float):
    return SimpleNamespace(peer=peer, started=started, identity=None)


def test_handshakes_from_a_flood_never_keep_out_another_address():
    admission = Admission(Limits(pending=8, pending_per_address=4))
    flood = [_record(f"10.0.0.{a}", started=n) for n in range(4) for a in (1, 2)]
    assert all(admission.handshake(r) == (True, None) for r in flood)  # 8: the budget is full
    assert admission.handshake(_record("10.0.0.1", 10)) == (False, None)  # its address holds 4: the most
    newcomer = _record("10.0.0.9", 11)
    admitted, displaced = admission.handshake(newcomer)
    assert admitted and displaced is flood[0]  # the oldest of an address holding the most
    again = _record("10.0.0.1", 12)
    assert admission.handshake(again) == (False, None)  # 3 held: as many as 10.0.0.2 would keep
    admission.handshake_over(newcomer)  # the front end authenticated: its place is free
    assert admission.handshake(again) == (True, None)


def test_connections_are_counted_per_authenticated_front_end():
    admission = Admission(Limits(connections=5, per_peer=2))
    records = [_record("this machine", n) for n in range(6)]
    assert admission.authenticate(records[0], "process 10") is None
    assert admission.authenticate(records[1], "process 10") is None
    refused = admission.authenticate(records[2], "process 10")
    assert refused == "process 10 holds 2 connections to it (WORKER_MAX_CONNECTIONS_PER_PEER)"
    assert admission.authenticate(records[3], "process 11") is None  # another process of the same address
    admission.forget(records[0])
    assert admission.held("process 10") == 1 and admission.authenticate(records[2], "process 10") is None
    assert admission.authenticate(records[4], "process 12") is None
    assert admission.authenticate(records[5], "process 12") is None
    assert admission.authenticated == 5
    assert "WORKER_MAX_CONNECTIONS)" in admission.authenticate(_record("x", 9), "process 13")


@pytest.mark.parametrize("cap", [0, -1])
def test_a_pool_without_room_is_refused(cap):
    with pytest.raises(ValueError, match="WORKER_CONNECTIONS_PER_PROCESS"):
        ConnectionPool(cap, idle_seconds=60)
