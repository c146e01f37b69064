"""Fair admission to a model version's seats (inference/admission/fair_share.py): the
order seats are handed out in (deficit round robin over flows, weights,
costs), the per-flow queue bound, deadlines and cancellation, threads and an
event loop sharing one gate."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
import uvloop

from inference.admission.fair_share import ANONYMOUS_FLOW, FairShare, Gate, LoopLag, flow_of
from inference.ports import Principal
from inference.protocol.errors import DeadlineExceeded, RateLimited


def gate(seats: int = 1, queue_per_flow: int = 100, weights=None) -> Gate:
    return Gate("version 1 of model 'm'", seats, FairShare(queue_per_flow, weights))


async def grant_order(g: Gate, arrivals: list[tuple[str, int]], releases: int) -> list[str]:
    """Queue ``arrivals`` ((flow, cost), in this order) at ``g`` once its
    seats are taken, then give back one seat at a time ``releases`` times;
    the flows in the order their requests got a seat."""
    order: list[str] = []
    tasks = []
    for flow, cost in arrivals:

        async def wait(flow=flow, cost=cost):
            await g.enter_async(flow, cost=cost)
            order.append(flow)

        tasks.append(asyncio.create_task(wait()))
        await asyncio.sleep(0)  # it is queued before the next arrives
    assert g.waiting == len(arrivals)
    for _ in range(releases):
        g.leave()
        await asyncio.sleep(0)
        await asyncio.sleep(0)
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    return order


def take_all(g: Gate) -> None:
    for _ in range(g.seats):
        assert g.try_enter()
    assert not g.try_enter()


def test_flows_are_teams_team_less_tokens_and_anonymous_callers():
    assert flow_of(Principal(team="ml", token="t1")) == "team:ml"
    assert flow_of(Principal(token="t2", user="7")) == "token:t2"
    assert flow_of(Principal()) == ANONYMOUS_FLOW


def test_free_seats_are_taken_at_once_and_given_back():
    g = gate(seats=2)
    g.enter("team:a")
    g.enter("team:b")
    assert g.free == 0 and not g.try_enter()
    g.leave()
    assert g.free == 1 and g.try_enter()


def test_a_flood_queued_first_does_not_delay_another_flow_beyond_its_turn():
    g = gate(seats=1)
    take_all(g)
    arrivals = [("team:a", 1)] * 10 + [("team:b", 1)] * 3
    order = asyncio.run(grant_order(g, arrivals, releases=13))
    # b's three requests, queued behind a's ten, are served on alternate turns
    assert order == ["team:a", "team:b"] * 3 + ["team:a"] * 7


def test_weights_give_a_flow_more_turns_per_round():
    g = gate(seats=1, weights={"a": 3})
    take_all(g)
    arrivals = [("team:a", 1)] * 8 + [("team:b", 1)] * 4
    order = asyncio.run(grant_order(g, arrivals, releases=12))
    assert order == ["team:a"] * 3 + ["team:b"] + ["team:a"] * 3 + ["team:b"] + ["team:a"] * 2 + ["team:b"] * 2


def test_a_request_that_costs_several_turns_waits_for_them():
    g = gate(seats=1)
    take_all(g)
    # an ensemble segment of 3 steps (cost 3) of flow a, queued first, against b's single steps
    arrivals = [("team:a", 3), ("team:a", 3)] + [("team:b", 1)] * 5
    order = asyncio.run(grant_order(g, arrivals, releases=7))
    # a's request is served once a has had three turns' worth of credit: b runs a step in each turn meanwhile
    assert order == ["team:b", "team:b", "team:a", "team:b", "team:b", "team:b", "team:a"]


def test_a_flow_over_its_queue_bound_is_refused_while_others_still_queue():
    share = FairShare(queue_per_flow=2)
    g = Gate("version 1 of model 'm'", 1, share)
    other = Gate("version 1 of model 'n'", 1, share)
    take_all(g)
    take_all(other)

    async def scenario():
        waiting = [asyncio.create_task(g.enter_async("team:a")), asyncio.create_task(other.enter_async("team:a"))]
        await asyncio.sleep(0)
        assert share.queued == {"team:a": 2}  # the bound counts a flow's waiters at every gate of the process
        with pytest.raises(RateLimited) as refused:
            await g.enter_async("team:a")
        b = asyncio.create_task(g.enter_async("team:b"))
        await asyncio.sleep(0)
        assert share.queued == {"team:a": 2, "team:b": 1}
        for task in [*waiting, b]:
            task.cancel()
        await asyncio.gather(*waiting, b, return_exceptions=True)
        return refused.value

    refused = asyncio.run(scenario())
    assert refused.retry_after >= 1 and refused.http_status == 429
    assert "team a already has 2 requests waiting" in refused.message
    assert share.queued == {} and g.waiting == 0 and g.free == 0  # cancelled waiters left their queues


def test_a_deadline_passed_while_waiting_answers_deadline_exceeded_and_leaves_the_queue():
    g = gate(seats=1)
    take_all(g)
    with pytest.raises(DeadlineExceeded, match="waited for its turn at version 1 of model 'm'; it was not run"):
        g.enter("team:a", deadline=time.monotonic() + 0.05)
    assert g.waiting == 0 and g._share.queued == {}
    g.leave()
    assert g.free == 1


def test_threads_and_an_event_loop_share_one_gate():
    g = gate(seats=1)
    take_all(g)
    got = []

    def in_thread():
        g.enter("team:t")
        got.append("thread")
        g.leave()

    async def on_loop():
        thread = threading.Thread(target=in_thread)
        thread.start()
        while g.waiting < 1:
            await asyncio.sleep(0.001)
        task = asyncio.create_task(g.enter_async("team:l"))
        while g.waiting < 2:
            await asyncio.sleep(0.001)
        await asyncio.to_thread(g.leave)  # released from another thread: the thread's turn, then the loop's
        await asyncio.wait_for(task, 5)
        got.append("loop")
        thread.join(5)
        g.leave()

    asyncio.run(on_loop())
    assert got == ["thread", "loop"]
    assert g.free == 1 and g.waiting == 0


def test_a_seat_granted_to_a_cancelled_waiter_goes_to_the_next():
    g = gate(seats=1)
    take_all(g)

    async def scenario():
        first = asyncio.create_task(g.enter_async("team:a"))
        second = asyncio.create_task(g.enter_async("team:b"))
        await asyncio.sleep(0)
        g.leave()  # granted to a's waiter, which is cancelled before it resumes
        first.cancel()
        await asyncio.gather(first, return_exceptions=True)
        await asyncio.wait_for(second, 1)
        return g.free, g.waiting

    assert asyncio.run(scenario()) == (0, 0)


def test_resizing_a_gate_hands_new_seats_to_waiters():
    g = gate(seats=1)
    take_all(g)

    async def scenario():
        tasks = [asyncio.create_task(g.enter_async("team:a")) for _ in range(3)]
        await asyncio.sleep(0)
        g.resize(3)
        for _ in range(3):
            await asyncio.sleep(0)
        done = sum(t.done() for t in tasks)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        return done

    assert asyncio.run(scenario()) == 2


async def _settles(lag: LoopLag, seconds: float = 2.0) -> bool:
    """Whether the lag says not behind within ``seconds`` on a loop that
    only waits: its ticks run on time, though a loaded test machine may
    delay one past ``late`` (once, on CI: a tick late within 20 ms)."""
    for _ in range(int(seconds / 0.01)):
        await asyncio.sleep(0.01)
        if not lag.behind():
            return True
    return False


def test_the_loop_lag_says_behind_only_while_the_loop_is_blocked():
    async def scenario():
        lag = LoopLag(asyncio.get_running_loop())
        assert not lag.behind()  # starts the tick
        calm = await _settles(lag)
        time.sleep(0.03)  # the loop is blocked: its tick is overdue
        blocked = lag.behind()
        return calm, blocked, await _settles(lag)

    assert asyncio.run(scenario()) == (True, True, True)


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_the_loop_lag_says_behind_once_the_loop_was_held_on_either_loop(loop):
    """An inline run holds the loop past its tick; on the loop's next turn
    the lag says behind, also on uvloop, which runs the overdue tick before
    the calls that arrived meanwhile (GRPC_EVENT_LOOP)."""

    async def scenario():
        lag = LoopLag(asyncio.get_running_loop())
        assert not lag.behind()  # starts the tick
        calm = await _settles(lag)
        time.sleep(0.03)  # an inline run holds the loop
        await asyncio.sleep(0)  # the loop's next turn
        held = lag.behind()
        return calm, held, await _settles(lag)  # ticks on time again

    assert (uvloop.run if loop == "uvloop" else asyncio.run)(scenario()) == (True, True, True)


def test_an_ensemble_has_two_seats_per_process_and_none_when_fair_share_is_off():
    class Entry:
        model_name, number = "chain", 3

    on, off = FairShare(10), FairShare(10, enabled=False)
    gate = on.ensemble_gate(Entry())
    assert gate is on.ensemble_gate(Entry()) and gate.name == "ensemble 'chain' version 3"
    assert gate.try_enter() and gate.try_enter() and not gate.try_enter()
    free = off.ensemble_gate(Entry())
    assert all(free.try_enter() for _ in range(1000))
