"""Progressive rollouts' services against the database (SQLite, and
PostgreSQL in the ``db`` pass): the analysis's arithmetic against numbers
computed here with numpy from the requests the test counts into the
rollups (through the serving side's own writer, as a serving process
does), the verdicts (advance, promote, roll back, extend), the routes the
rollout sets through the registry, the audit log and the webhook
deliveries in order, a person's pause, resume, promote and abort, refusals,
and one judgement per step however many tickers run at once."""

from __future__ import annotations

import threading
from datetime import timedelta

import numpy as np
import pytest
from django.db import connection, connections
from django.utils import timezone

from inference.observability.rollups import MinuteRollups
from inference.observability.rollups_db import DatabaseRollups
from models_store import errors
from models_store.intake import services as intake
from models_store.models import AuditEvent, Rollout, WebhookDelivery
from models_store.registry import selectors
from models_store.registry.services import routes
from models_store.rollouts import analysis, services
from models_store.webhooks import services as webhooks
from tests.support import onnx_models as m
from tests.support.store import person, stage
from tests.support.webhook_receiver import Receiver, deliver_inline

pytestmark = [pytest.mark.db, pytest.mark.django_db(transaction=True)]

ROLLOUT_EVENTS = ["rollout.started", "rollout.advanced", "rollout.promoted", "rollout.rolled_back"]


@pytest.fixture(autouse=True)
def _settings(settings, monkeypatch):
    deliver_inline(settings, monkeypatch, retry_max_seconds=0.2)
    settings.CHART_FLUSH_SECONDS = 0.5
    settings.STATISTICS_FLUSH_SECONDS = 0.5


@pytest.fixture
def model():
    """Model "m" of team ml: versions 1 and 2 READY, label stable -> 1; alice of team ml."""
    alice = person("alice", "ml")
    team = alice.teams.get()
    for scale in (1.0, 2.0):
        intake.version_upload(model_name="m", staged=stage(m.affine(scale, 0.0)), actor=alice, team=team)
    found = selectors.model_get("m")
    routes.label_set(model=found, name="stable", number=1, actor=alice)
    return selectors.model_get("m"), alice


class Traffic:
    """The requests a serving process answered, counted into the rollups as
    the statistics recorder does and written as its rows (writer ``name``);
    also kept here, per version, for the test's own arithmetic."""

    def __init__(self, name: str):
        self.name, self.rollups, self.store = name, MinuteRollups(), DatabaseRollups()
        self.answered: dict[int, list[int]] = {1: [], 2: []}
        self.failed = {1: 0, 2: 0}

    def add(self, at: float, version: int, compute_ns, failures: int = 0, counted: bool = True) -> None:
        for ns in compute_ns:
            self.rollups.success(at, "m", version, 1, 1000, int(ns), 1, True)
        for _ in range(failures):
            self.rollups.failure(at, "m", version)
        if counted:
            self.answered[version] += [int(ns) for ns in compute_ns]
            self.failed[version] += failures
        self.store.write(self.name, self.rollups.pending())


def _judge(rollout: Rollout) -> list[tuple[int, str]]:
    """Tick as if the step's judgement time had come."""
    rollout.refresh_from_db()
    return services.tick(now=rollout.judge_at + timedelta(milliseconds=1))


def _start(found, alice, **options) -> Rollout:
    defaults = {"steps": [10, 50, 100], "pause_seconds": 1.0, "min_requests": 20}
    return services.rollout_start(model=found, canary_version=2, actor=alice, **{**defaults, **options})


def test_the_analysis_counts_only_the_steps_requests(model):
    found, alice = model
    rng = np.random.default_rng(7)
    one, two = Traffic("machine-1"), Traffic("machine-2")
    before = timezone.now().timestamp()
    # Before the step: the canary called by version number, failing; none of it may count.
    one.add(before, 2, rng.integers(1_000_000, 2_000_000, 5), failures=9, counted=False)
    one.add(before - 60, 2, [], failures=50, counted=False)  # the minute before: outside the window
    one.add(before, 1, rng.integers(1_000_000, 2_000_000, 30), counted=False)
    rollout = _start(found, alice)
    at = rollout.step_started_at.timestamp() + 0.2
    one.add(at, 2, rng.lognormal(np.log(2e6), 0.3, 40), failures=1)
    one.add(at, 1, rng.lognormal(np.log(2e6), 0.3, 300), failures=2)
    two.add(at, 2, rng.lognormal(np.log(2e6), 0.3, 25), failures=2)
    two.add(at - 120, 2, [], failures=70, counted=False)  # an old minute rewritten late: outside too
    assert _judge(rollout) == [(rollout.pk, "advanced")]
    rollout.refresh_from_db()
    (record,) = rollout.analyses
    canary_ns = np.array(one.answered[2] + two.answered[2])
    stable_ns = np.array(one.answered[1])
    canary_errors, stable_errors = one.failed[2] + two.failed[2], one.failed[1]
    assert record["canary"]["requests"] == canary_ns.size + canary_errors == 68
    assert record["canary"]["errors"] == canary_errors == 3
    assert record["canary"]["error_rate"] == pytest.approx(3 / 68)
    assert record["stable"]["requests"] == stable_ns.size + stable_errors == 302
    assert record["stable"]["error_rate"] == pytest.approx(2 / 302)
    # p99 from the summed histograms: within one bucket's width (12.5 %) of numpy's over the raw durations.
    assert record["canary"]["p99_ms"] == pytest.approx(np.percentile(canary_ns, 99) / 1e6, rel=0.125)
    assert record["stable"]["p99_ms"] == pytest.approx(np.percentile(stable_ns, 99) / 1e6, rel=0.125)
    assert record["p99_ratio"] == pytest.approx(record["canary"]["p99_ms"] / record["stable"]["p99_ms"])
    assert record["verdict"] == "advance" and record["weight"] == 10 and record["reasons"] == []
    assert rollout.step == 1 and selectors.model_get("m").traffic == {"canary": 50, "stable": 50}


@pytest.mark.parametrize(
    "canary, stable, verdict, words",
    [
        ((19, 0, 1.0), (500, 0, 1.0), "extend", "19 requests, fewer than 20"),
        ((20, 1, 1.0), (500, 0, 1.0), "pass", None),  # 5.0 %: at the threshold passes
        ((40, 3, 1.0), (500, 0, 1.0), "fail", "7.50% (3 of 40) is above 5.00%"),
        ((40, 0, 1.5), (500, 0, 1.0), "pass", None),  # 1.5x: at the ratio passes
        ((40, 0, 3.1), (500, 0, 2.0), "fail", "1.55x"),
        ((40, 0, 1.9), (500, 0, 1.0), "pass", None),  # 1.9x but only 0.9 ms slower: within the tolerance
        ((40, 0, 9.0), (19, 0, 1.0), "pass", None),  # too few stable requests to compare latencies
    ],
)
def test_the_verdict(canary, stable, verdict, words):
    def numbers(requests, errors_, p99):
        return {"requests": requests, "errors": errors_, "error_rate": errors_ / requests, "p99_ms": p99}

    thresholds = analysis.Thresholds(max_error_rate=0.05, max_p99_ratio=1.5, p99_tolerance_ms=1.0, min_requests=20)
    result, reasons, _ = analysis.judge(numbers(*canary), numbers(*stable), thresholds)
    assert result == {"extend": analysis.EXTEND, "pass": analysis.PASS, "fail": analysis.FAIL}[verdict]
    assert (reasons == []) if words is None else (words in " ".join(reasons)), reasons


def _story(found) -> tuple[list[str], list[str]]:
    """The model's rollout audit events and rollout webhook events, oldest first."""
    actions = list(
        AuditEvent.objects.filter(model=found, action__startswith="rollout.")
        .order_by("id")
        .values_list("action", flat=True)
    )
    events = list(
        WebhookDelivery.objects.filter(model_name="m", event__startswith="rollout.")
        .order_by("id")
        .values_list("event", flat=True)
    )
    return actions, events


def test_a_failing_canary_is_rolled_back_at_its_first_step(model):
    found, alice = model
    with Receiver() as hooks:
        webhooks.subscription_create(team=alice.teams.get(), url=hooks.url, events=ROLLOUT_EVENTS, actor=alice)
        rollout = _start(found, alice)
        assert selectors.model_get("m").traffic == {"canary": 10, "stable": 90}
        assert selectors.label_numbers(found) == {"canary": 2, "stable": 1}
        traffic = Traffic("machine-1")
        at = rollout.step_started_at.timestamp() + 0.1
        traffic.add(at, 2, np.full(16, 1_000_000), failures=4)  # 20 %
        traffic.add(at, 1, np.full(180, 1_000_000))
        assert _judge(rollout) == [(rollout.pk, "rolled_back")]
        hooks.wait_for(2)
    rollout.refresh_from_db()
    assert rollout.status == "rolled_back" and rollout.step == 0 and rollout.judge_at is None
    assert "20.00% (4 of 20) is above 5.00%" in rollout.reason
    assert selectors.model_get("m").traffic == {"canary": 0, "stable": 100}
    assert selectors.label_numbers(found) == {"canary": 2, "stable": 1}
    assert _story(found) == (["rollout.started", "rollout.rolled_back"], ["rollout.started", "rollout.rolled_back"])
    assert [r.headers["webhook-id"] for r in hooks.received] == list(
        WebhookDelivery.objects.filter(model_name="m", event__startswith="rollout.")
        .order_by("id")
        .values_list("message_id", flat=True)
    )
    assert services.tick(now=timezone.now() + timedelta(hours=1)) == []  # ended: never judged again


def test_a_healthy_canary_goes_through_every_step_and_is_promoted(model):
    found, alice = model
    rollout = _start(found, alice)
    traffic = Traffic("machine-1")
    seen = []
    for weight in (10, 50, 100):
        rollout.refresh_from_db()
        at = rollout.step_started_at.timestamp() + 0.1
        traffic.add(at, 2, np.full(2 * weight, 1_000_000))
        traffic.add(at, 1, np.full(2 * (100 - weight), 1_000_000))
        seen.append(selectors.model_get("m").traffic)
        _judge(rollout)
    rollout.refresh_from_db()
    assert seen == [{"canary": w, "stable": 100 - w} for w in (10, 50, 100)]
    assert rollout.status == "promoted" and [a["verdict"] for a in rollout.analyses] == [
        "advance",
        "advance",
        "promote",
    ]
    assert [a["canary"]["requests"] for a in rollout.analyses] == [20, 100, 200]
    assert [a["stable"]["requests"] for a in rollout.analyses] == [180, 100, 0]
    assert selectors.label_numbers(found)["stable"] == 2 and selectors.model_get("m").traffic == {}
    assert _story(found)[0] == ["rollout.started", "rollout.advanced", "rollout.advanced", "rollout.promoted"]
    promoted = AuditEvent.objects.get(action="rollout.promoted")
    assert promoted.actor_name == "system" and promoted.version_number == 2


def test_too_few_requests_extend_the_step(model):
    found, alice = model
    rollout = _start(found, alice)
    Traffic("machine-1").add(rollout.step_started_at.timestamp() + 0.1, 2, np.full(19, 1_000_000))
    first_judgement = rollout.judge_at
    assert _judge(rollout) == [(rollout.pk, "extended")]
    rollout.refresh_from_db()
    assert rollout.status == "running" and rollout.step == 0 and rollout.judge_at > first_judgement
    assert [a["verdict"] for a in rollout.analyses] == ["extend"] and rollout.analyses[0]["canary"]["requests"] == 19


def test_a_person_pauses_resumes_promotes_and_aborts(model):
    found, alice = model
    rollout = _start(found, alice)
    services.rollout_pause(rollout=rollout, actor=alice)
    assert services.tick(now=timezone.now() + timedelta(hours=1)) == []  # a paused rollout is not judged
    with pytest.raises(errors.Conflict, match="is paused: it cannot be paused"):
        services.rollout_pause(rollout=rollout, actor=alice)
    services.rollout_resume(rollout=rollout, actor=alice)
    services.rollout_promote(rollout=rollout, actor=alice)
    assert selectors.label_numbers(found)["stable"] == 2 and selectors.model_get("m").traffic == {}
    with pytest.raises(errors.Conflict, match="is promoted: it cannot be aborted"):
        services.rollout_abort(rollout=rollout, actor=alice)
    # A second rollout, back to version 1, aborted: stable (now 2) takes every request again.
    second = services.rollout_start(model=found, canary_version=1, actor=alice, steps=[50, 100], pause_seconds=5)
    assert selectors.model_get("m").traffic == {"canary": 50, "stable": 50}
    services.rollout_abort(rollout=second, actor=alice)
    assert selectors.model_get("m").traffic == {"canary": 0, "stable": 100}
    events = AuditEvent.objects.filter(action__startswith="rollout.").order_by("id")
    assert [(e.action, e.actor_name) for e in events] == [
        ("rollout.started", "alice"), ("rollout.paused", "alice"), ("rollout.resumed", "alice"),
        ("rollout.promoted", "alice"), ("rollout.started", "alice"), ("rollout.aborted", "alice"),
    ]  # fmt: skip


def test_a_change_of_the_routes_by_hand_pauses_the_rollout(model):
    found, alice = model
    rollout = _start(found, alice)
    routes.traffic_set(model=found, weights={"canary": 30, "stable": 70}, actor=alice)
    assert _judge(rollout) == [(rollout.pk, "paused")]
    rollout.refresh_from_db()
    assert rollout.status == "paused" and "changed by hand" in rollout.reason and "canary': 30" in rollout.reason
    services.rollout_resume(rollout=rollout, actor=alice)  # the step's split again
    assert selectors.model_get("m").traffic == {"canary": 10, "stable": 90}


@pytest.mark.parametrize(
    "options, error, words",
    [
        ({"canary_version": 9}, errors.Conflict, "has no version 9"),
        ({"canary_version": 1}, errors.Conflict, "is the stable version"),
        ({"steps": [50, 25, 100]}, errors.Conflict, "increase and end at 100"),
        ({"steps": [5, 50]}, errors.Conflict, "increase and end at 100"),
        ({"steps": [0, 100]}, errors.RegistryError, "from 1 to 100"),
        ({"pause_seconds": 0.0}, errors.RegistryError, "pause_seconds"),
        ({"max_error_rate": 1.5}, errors.RegistryError, "max_error_rate"),
    ],
)
def test_refused_starts_change_nothing(model, options, error, words):
    found, alice = model
    with pytest.raises(error, match=words):
        services.rollout_start(model=found, actor=alice, **{"canary_version": 2, **options})
    assert not Rollout.objects.exists() and selectors.model_get("m").traffic == {}


def test_one_active_rollout_per_model(model):
    found, alice = model
    _start(found, alice)
    with pytest.raises(errors.Conflict, match="has a rollout running already"):
        _start(found, alice)
    assert Rollout.objects.count() == 1


def test_a_stale_ticker_cannot_claim_a_step_another_judged(model):
    found, alice = model
    rollout = _start(found, alice)
    mine, theirs = Rollout.objects.get(pk=rollout.pk), Rollout.objects.get(pk=rollout.pk)
    assert services._claim(theirs)  # another process took the step first
    assert not services._claim(mine)  # this one read it before: its claim fails, it judges nothing


@pytest.mark.skipif(connection.vendor != "postgresql", reason="row locks: PostgreSQL (SQLite: the claim above)")
def test_four_tickers_at_once_judge_a_step_once(model, monkeypatch):
    found, alice = model
    rollout = _start(found, alice)
    Traffic("machine-1").add(rollout.step_started_at.timestamp() + 0.1, 2, np.full(30, 1_000_000))
    rollout.refresh_from_db()
    now = rollout.judge_at + timedelta(milliseconds=1)
    analyse = services._analyse

    def slow(*args):  # long enough for every ticker to reach the row while the first holds it
        threading.Event().wait(0.3)
        return analyse(*args)

    monkeypatch.setattr(services, "_analyse", slow)
    barrier, outcomes = threading.Barrier(4), []

    def ticker():
        try:
            barrier.wait()
            outcomes.extend(services.tick(now=now))
        finally:
            connections.close_all()

    threads = [threading.Thread(target=ticker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    rollout.refresh_from_db()
    assert outcomes == [(rollout.pk, "advanced")] and len(rollout.analyses) == 1 and rollout.step == 1
    assert AuditEvent.objects.filter(action="rollout.advanced").count() == 1
