"""Webhooks of teams: each event emitted by the change that causes it, with
its payload; Standard Webhooks signatures verified by the
``standardwebhooks`` library; retries with back-off and the same
``webhook-id`` (at-least-once), giving up after the retry window, the
redeliver; targets on private addresses refused unless
WEBHOOK_ALLOWED_HOSTS lists them. Deliveries go to a real HTTP receiver on
127.0.0.1; the attempts run inline (the timer's thread replaced by a
sleep), so the test database sees one writer."""

from __future__ import annotations

import itertools
import json
import time

import pytest
from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError

from hosting.celery import app as celery_app
from models_store.intake import services as intake
from models_store.models import AuditEvent, ModelVersion, WebhookDelivery
from models_store.registry import selectors
from models_store.registry.services import models as model_services
from models_store.registry.services import routes
from models_store.webhooks import delivery as webhook_delivery
from models_store.webhooks import services as webhooks
from tests.support import onnx_models as m
from tests.support.store import person, stage
from tests.support.webhook_receiver import Receiver, deliver_inline

pytestmark = [pytest.mark.db, pytest.mark.django_db(transaction=True)]

ALL = list(webhooks.EVENTS)


@pytest.fixture(autouse=True)
def _inline(settings, monkeypatch):
    """Small back-off, 127.0.0.1 allowed, attempts inline after their delay."""
    deliver_inline(settings, monkeypatch, retry_max_seconds=0.2)
    settings.WEBHOOK_TIMEOUT_SECONDS = 5.0


@pytest.fixture
def alice():
    return person("alice", "ml")


def _subscribe(user, url: str, events=ALL):
    return webhooks.subscription_create(team=user.teams.get(name="ml"), url=url, events=events, actor=user)


def _verified(subscription, received) -> dict:
    """The payload of a received request, after verifying its signature."""
    return Webhook(subscription.secret).verify(received.body, received.headers)


def test_version_ready_and_failed_are_signed_with_their_payloads(alice):
    with Receiver() as hooks:
        subscription = _subscribe(alice, hooks.url, ["version.ready", "version.failed"])
        assert subscription.secret.startswith("whsec_")
        intake.version_upload(model_name="m", staged=stage(m.affine(2.0, 0.0)), actor=alice, team=alice.teams.get())
        intake.version_upload(model_name="m", staged=stage(m.failing_model()), actor=alice)
        received = hooks.wait_for(2)
    ready, failed = (ModelVersion.objects.get(model__name="m", number=n) for n in (1, 2))
    assert (ready.state, failed.state) == ("READY", "FAILED")
    first, second = (_verified(subscription, r) for r in received)
    assert first["type"] == "version.ready" and second["type"] == "version.failed"
    assert first["data"] == {
        "model": "m", "team": "ml", "version": 1, "state": "READY", "reason": "", "sha256": ready.sha256,
        "inputs": ready.inputs, "outputs": ready.outputs,
    }  # fmt: skip
    assert second["data"]["version"] == 2 and second["data"]["reason"] == failed.reason != ""
    assert received[0].path == "/hooks" and received[0].headers["content-type"] == "application/json"
    assert received[0].headers["webhook-id"] != received[1].headers["webhook-id"]
    # Another secret, or a changed body, does not verify.
    with pytest.raises(WebhookVerificationError):
        Webhook(webhooks.new_secret()).verify(received[0].body, received[0].headers)
    with pytest.raises(WebhookVerificationError):
        Webhook(subscription.secret).verify(received[0].body.replace(b'"m"', b'"n"'), received[0].headers)


@pytest.fixture
def two_versions(alice):
    team = alice.teams.get()
    for scale in (1.0, 2.0):
        intake.version_upload(model_name="m", staged=stage(m.affine(scale, 0.0)), actor=alice, team=team)
    return selectors.model_get("m")


def _events(hooks: Receiver, subscription, count: int) -> list[dict]:
    return [_verified(subscription, r) for r in hooks.wait_for(count)]


def test_label_moves_and_traffic_changes(alice, two_versions):
    with Receiver() as hooks:
        subscription = _subscribe(alice, hooks.url, ["label.moved", "traffic.changed"])
        model = two_versions
        routes.label_set(model=model, name="stable", number=1, actor=alice)
        routes.label_set(model=model, name="canary", number=2, actor=alice)
        routes.label_set(model=model, name="canary", number=2, actor=alice)  # no move: no event
        routes.traffic_set(model=model, weights={"stable": 90, "canary": 10}, actor=alice)
        routes.traffic_promote(model=model, actor=alice)
        routes.traffic_rollback(model=model, actor=alice)  # the split is already stable 100: no change, no event
        routes.traffic_set(model=model, weights={}, actor=alice)
        routes.label_delete(model=model, name="canary", actor=alice)
        events = _events(hooks, subscription, 7)
        time.sleep(0.2)
        assert len(hooks.received) == 7
    moved = [(e["data"]["label"], e["data"]["previous_version"], e["data"]["version"]) for e in events
             if e["type"] == "label.moved"]  # fmt: skip
    assert moved == [("stable", None, 1), ("canary", None, 2), ("stable", 1, 2), ("canary", 2, None)]
    traffic = [e["data"] for e in events if e["type"] == "traffic.changed"]
    assert [(t["action"], t["before"], t["traffic"]) for t in traffic] == [
        ("set", {}, {"canary": 10, "stable": 90}),
        ("promote", {"canary": 10, "stable": 90}, {"canary": 0, "stable": 100}),
        ("set", {"canary": 0, "stable": 100}, {}),
    ]
    assert traffic[0]["versions"] == {"canary": 2, "stable": 1} and traffic[1]["versions"] == {"canary": 2, "stable": 2}
    assert {e["data"]["actor"] for e in events} == {"alice"} and {e["data"]["model"] for e in events} == {"m"}


def test_model_deleted_and_only_the_events_asked_for(alice, two_versions):
    with Receiver() as hooks:
        subscription = _subscribe(alice, hooks.url, ["model.deleted"])
        routes.label_set(model=two_versions, name="stable", number=1, actor=alice)  # not asked for
        model_services.model_delete(model=two_versions, actor=alice)
        (event,) = _events(hooks, subscription, 1)
        time.sleep(0.2)
        assert len(hooks.received) == 1
    assert event["type"] == "model.deleted" and event["data"] == {"model": "m", "team": "ml", "actor": "alice"}
    assert WebhookDelivery.objects.get().model_name == "m"


def test_other_teams_events_are_not_sent(alice, two_versions):
    bob = person("bob", "ops")
    with Receiver() as hooks:
        webhooks.subscription_create(team=bob.teams.get(), url=hooks.url, events=ALL, actor=bob)
        routes.label_set(model=two_versions, name="stable", number=1, actor=alice)
        time.sleep(0.3)
        assert hooks.received == []
    assert not WebhookDelivery.objects.exists()


def test_500_three_times_then_200_is_delivered_once_more_with_the_same_id(alice, two_versions, settings):
    with Receiver([500, 500, 500]) as hooks:
        subscription = _subscribe(alice, hooks.url, ["label.moved"])
        routes.label_set(model=two_versions, name="stable", number=1, actor=alice)
        received = hooks.wait_for(4)
        time.sleep(0.5)
        assert len(hooks.received) == 4  # exactly once more after the failures
    assert len({r.headers["webhook-id"] for r in received}) == 1
    payloads = [_verified(subscription, r) for r in received]  # each attempt signed anew, all verify
    assert all(p == payloads[0] for p in payloads)
    gaps = [b.at - a.at for a, b in itertools.pairwise(received)]
    expected = [webhook_delivery.retry_delay(n) for n in (1, 2, 3)]
    assert expected == [0.05, 0.1, 0.2] and all(gap >= want * 0.9 for gap, want in zip(gaps, expected, strict=True))
    delivery = WebhookDelivery.objects.get()
    assert delivery.message_id == received[0].headers["webhook-id"] and delivery.state == "SUCCEEDED"
    attempts = list(delivery.attempts.order_by("number"))
    assert [(a.number, a.status_code) for a in attempts] == [(1, 500), (2, 500), (3, 500), (4, 200)]
    assert [a.response_body for a in attempts] == [f"answer {s} to request {n}" for n, s in
                                                   ((1, 500), (2, 500), (3, 500), (4, 200))]  # fmt: skip
    assert all(a.duration_ms > 0 and a.error == "" for a in attempts)


def test_retries_end_after_the_window_and_a_redeliver_sends_it_again(alice, two_versions, settings):
    settings.WEBHOOK_RETRY_WINDOW_SECONDS = 0.3
    with Receiver([503] * 50) as hooks:
        subscription = _subscribe(alice, hooks.url, ["label.moved"])
        routes.label_set(model=two_versions, name="stable", number=1, actor=alice)
        delivery = WebhookDelivery.objects.get()
        assert delivery.state == "FAILED" and delivery.next_attempt_at is None
        failed = len(hooks.received)
        assert 2 <= failed == delivery.attempt_count <= 5
        hooks.statuses = []
        webhooks.redeliver(delivery=delivery, actor=alice)
        received = hooks.wait_for(failed + 1)
    delivery.refresh_from_db()
    assert delivery.state == "SUCCEEDED" and len({r.headers["webhook-id"] for r in received}) == 1
    last = delivery.attempts.order_by("-number").first()
    assert (last.status_code, last.requested_by, last.number) == (200, "alice", failed + 1)
    _verified(subscription, received[-1])
    event = AuditEvent.objects.get(action="webhook.redeliver")
    assert event.actor_name == "alice" and event.detail["delivery"] == delivery.message_id


def test_a_private_address_is_refused_without_the_allow_list(alice, settings):
    settings.WEBHOOK_ALLOWED_HOSTS = []
    team = alice.teams.get()
    for url in ("http://127.0.0.1:9/x", "http://localhost/", "http://10.0.0.8/", "http://169.254.169.254/latest",
                "http://[::1]:8080/", "http://192.168.1.1/", "ftp://example.com/"):  # fmt: skip
        with pytest.raises(webhooks.SubscriptionRefused):
            webhooks.subscription_create(team=team, url=url, events=ALL, actor=alice)
    assert not team.webhooks.exists() and not AuditEvent.objects.filter(action="webhook.create").exists()
    with pytest.raises(webhooks.SubscriptionRefused, match="events are one or more of"):
        webhooks.subscription_create(team=team, url="http://127.0.0.1/", events=["version.deleted"], actor=alice)


def test_the_address_is_checked_again_at_delivery_time(alice, two_versions, settings):
    with Receiver() as hooks:
        subscription = _subscribe(alice, hooks.url, ["label.moved"])  # allowed now ...
        settings.WEBHOOK_ALLOWED_HOSTS = []  # ... not any more (as when a name resolves elsewhere later)
        settings.WEBHOOK_RETRY_WINDOW_SECONDS = 0.1
        routes.label_set(model=two_versions, name="stable", number=1, actor=alice)
        time.sleep(0.2)
        assert hooks.received == []
    attempt = WebhookDelivery.objects.get(subscription=subscription).attempts.first()
    assert attempt.status_code is None and "loopback" in attempt.error and attempt.error.startswith("refused")


def test_subscriptions_are_audited_with_their_actor(alice):
    subscription = _subscribe(alice, "http://127.0.0.1:9/x")
    created = AuditEvent.objects.get(action="webhook.create")
    assert created.actor_name == "alice" and created.detail["team"] == "ml" and created.detail["events"] == ALL
    assert subscription.secret not in json.dumps(created.detail)
    webhooks.subscription_delete(subscription=subscription, actor=alice)
    assert AuditEvent.objects.get(action="webhook.delete").actor_name == "alice"


def test_a_celery_worker_delivers_in_worker_mode(alice, two_versions, monkeypatch, settings):
    """Where no thread delivers, the Celery task does (eager here: no broker in
    this test, and an eager task does not wait for its countdown: no back-off)."""
    settings.WEBHOOK_RETRY_SECONDS = 0
    # Eager whatever an earlier test of this process left in Celery's configuration (a CI run found
    # a broker URL of another test's Redis there: the task could not be queued).
    monkeypatch.setitem(celery_app.conf, "task_always_eager", True)
    monkeypatch.setattr(webhook_delivery, "_delivers_here", lambda: False)
    monkeypatch.setattr(webhook_delivery, "_start_timer", lambda *a: pytest.fail("a thread was started"))
    with Receiver([500]) as hooks:
        subscription = _subscribe(alice, hooks.url, ["label.moved"])
        routes.label_set(model=two_versions, name="stable", number=1, actor=alice)
        received = hooks.wait_for(2)
    assert received[0].headers["webhook-id"] == received[1].headers["webhook-id"]
    _verified(subscription, received[1])
    assert WebhookDelivery.objects.get().state == "SUCCEEDED"


def test_a_paused_subscription_gets_no_new_deliveries(alice, two_versions):
    with Receiver() as hooks:
        subscription = _subscribe(alice, hooks.url, ["label.moved"])
        webhooks.subscription_update(subscription=subscription, actor=alice, active=False)
        routes.label_set(model=two_versions, name="stable", number=1, actor=alice)
        time.sleep(0.2)
        assert hooks.received == [] and not WebhookDelivery.objects.exists()
        webhooks.subscription_update(subscription=subscription, actor=alice, active=True)
        routes.label_set(model=two_versions, name="stable", number=2, actor=alice)
        (event,) = _events(hooks, subscription, 1)
    assert event["data"]["previous_version"] == 1 and event["data"]["version"] == 2
    updates = AuditEvent.objects.filter(action="webhook.update").order_by("id")
    assert [(e.actor_name, e.detail["active"]) for e in updates] == [("alice", False), ("alice", True)]


def test_an_ensemble_upload_is_announced_ready(alice):
    """An ensemble's version is READY at once (its checks run in the upload): version.ready, its signature."""
    from tests.support.repository import _ensemble

    intake.version_upload(model_name="pre", staged=stage(m.standardize()), actor=alice, team=alice.teams.get())
    config = _ensemble(
        "pipe",
        '{ name: "RAW" data_type: TYPE_FP32 dims: [ -1, 4 ] }',
        '{ name: "F" data_type: TYPE_FP32 dims: [ -1, 4 ] }',
        [("pre", -1, {"raw": "RAW"}, {"features": "F"})],
    )
    with Receiver() as hooks:
        subscription = _subscribe(alice, hooks.url, ["version.ready"])
        version = intake.upload(
            user=alice, token=None, model_name="pipe", staged=None, team_name="ml", description="", config=config
        )
        (event,) = _events(hooks, subscription, 1)
    assert event["type"] == "version.ready"
    assert event["data"] == {
        "model": "pipe", "team": "ml", "version": 1, "state": "READY", "reason": "", "sha256": version.sha256,
        "inputs": [{"name": "RAW", "datatype": "FP32", "shape": [-1, 4]}],
        "outputs": [{"name": "F", "datatype": "FP32", "shape": [-1, 4]}],
    }  # fmt: skip
