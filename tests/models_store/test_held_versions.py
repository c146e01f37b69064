"""Held versions: a version that becomes READY (validated, imported,
restored) whose signature would break the callers of the default route if
the version policy chose it is held (READY, not chosen, ``version.held``
audited and sent to webhooks) until a person promotes it; retiring or
deleting the version the default route serves is guarded the same way, and
so is a repository load's config override. The comparison is always with
what the default route serves now. Over the services, the management API,
the web UI and the CLI (runs on SQLite and on PostgreSQL)."""

from __future__ import annotations

import json

import pytest
from django.core.management import CommandError, call_command
from django.test import Client

from models_store import errors
from models_store.config.triton import ConfigError
from models_store.intake import services as intake
from models_store.models import AuditEvent, WebhookDelivery
from models_store.registry import selectors
from models_store.registry.models import ModelVersion
from models_store.registry.services import models as model_services
from models_store.registry.services import routes, states, versions
from models_store.webhooks import delivery as webhook_delivery
from models_store.webhooks import services as webhooks
from tests.support import onnx_models as m
from tests.support.store import PASSWORD, person, stage

pytestmark = [pytest.mark.db, pytest.mark.django_db(transaction=True)]

OLD = m.passthrough([("x", "FP32", ("N", 4))], [("y", "FP32")])
BREAKING = m.passthrough([("features", "FP32", ("N", 5))], [("y", "FP32")])
COMPATIBLE = m.passthrough([("x", "FP32", ("N", 4))], [("y", "FP32"), ("y2", "FP32")])
DIFFERENCES = [
    "the default route: input 'x' removed (version 1 -> 2)",
    "the default route: input 'features' added and required (version 1 -> 2)",
    "the default route: output 'y' dimension 1 is 5, not 4 ([-1, 4] -> [-1, 5]) (version 1 -> 2)",
]


@pytest.fixture
def alice():
    return person("alice", "ml")


def upload(alice, payload: bytes) -> ModelVersion:
    """The version ``payload`` became (validated in this process), read again."""
    team = alice.teams.get()
    uploaded = intake.version_upload(model_name="g", staged=stage(payload), actor=alice, team=team)
    return version(uploaded.number)


def version(number: int) -> ModelVersion:
    return selectors.model_get("g").versions.get(number=number)


def serving():
    return selectors.serving(selectors.model_get("g"))


def actions_of(number: int) -> list[str]:
    return list(
        AuditEvent.objects.filter(model_name="g", version_number=number).order_by("id").values_list("action", flat=True)
    )


def test_a_breaking_version_under_latest_is_held_and_the_default_stays(alice, settings, monkeypatch):
    settings.WEBHOOK_ALLOWED_HOSTS = ["127.0.0.1"]
    monkeypatch.setattr(webhook_delivery, "_start_timer", lambda delay, delivery_id: None)  # recorded, not sent
    webhooks.subscription_create(
        team=alice.teams.get(), url="http://127.0.0.1:9/hook", events=["version.held"], actor=alice
    )
    upload(alice, OLD)
    held = upload(alice, BREAKING)
    assert (held.state, held.held) == ("READY", True)
    assert held.reason.startswith("held: its signature would break the callers of the default route (")
    assert all(difference in held.reason for difference in DIFFERENCES)
    state = serving()
    assert (state.default, state.served, state.serves(2)) == (1, (1,), False)
    assert state.reason(2, "READY", held.reason) == held.reason
    assert actions_of(2) == ["version.upload", "version.ready", "version.held"]
    event = AuditEvent.objects.get(model_name="g", version_number=2, action="version.held")
    assert event.detail["differences"] == DIFFERENCES
    delivery = WebhookDelivery.objects.get(event="version.held")
    assert delivery.payload["data"]["version"] == 2
    assert delivery.payload["data"]["differences"] == DIFFERENCES


def test_a_compatible_version_is_not_held_and_becomes_the_default(alice):
    upload(alice, OLD)
    new = upload(alice, COMPATIBLE)
    assert (new.state, new.held, new.reason) == ("READY", False, "")
    assert serving().default == 2


@pytest.mark.parametrize("policy", ["specific", "split"])
def test_a_version_the_policy_would_not_choose_is_not_held(alice, policy):
    upload(alice, OLD)
    if policy == "specific":
        model_services.model_set_policy(model=selectors.model_get("g"), policy="specific", specific=[1], actor=alice)
    else:
        routes.label_set(model=selectors.model_get("g"), name="stable", number=1, actor=alice)
        routes.traffic_set(model=selectors.model_get("g"), weights={"stable": 100}, actor=alice)
    new = upload(alice, BREAKING)
    assert (new.state, new.held) == ("READY", False)
    assert serving().default == 1


def test_a_label_serves_a_held_version_to_its_callers_only(alice):
    upload(alice, OLD)
    upload(alice, BREAKING)
    routes.label_set(model=selectors.model_get("g"), name="canary", number=2, actor=alice)
    state = serving()
    assert (state.default, state.served, state.serves(2)) == (1, (2, 1), True)
    assert version(2).held  # still held: the policy does not choose it


def test_promote_is_guarded_against_what_the_default_route_serves_now(alice):
    upload(alice, OLD)
    upload(alice, BREAKING)
    with pytest.raises(errors.SignatureConflict) as refused:
        versions.version_promote(version=version(2), actor=alice)
    assert refused.value.differences == DIFFERENCES
    assert version(2).held and serving().default == 1
    promoted = versions.version_promote(version=version(2), actor=alice, force=True)
    assert (promoted.held, promoted.reason) == (False, "")
    assert serving().default == 2
    event = AuditEvent.objects.get(model_name="g", version_number=2, action="version.promote")
    assert event.detail == {"forced": True, "differences": DIFFERENCES}
    with pytest.raises(errors.Conflict, match="only a held version can be promoted; version 2 is READY"):
        versions.version_promote(version=version(2), actor=alice)


def test_a_held_version_no_longer_breaking_is_promoted_without_force(alice):
    upload(alice, OLD)
    upload(alice, BREAKING)
    model_services.model_set_policy(model=selectors.model_get("g"), policy="specific", specific=[1], actor=alice)
    versions.version_retire(version=version(1), actor=alice)  # nothing else serves: nobody to break
    promoted = versions.version_promote(version=version(2), actor=alice)
    assert not promoted.held
    event = AuditEvent.objects.get(model_name="g", version_number=2, action="version.promote")
    assert event.detail == {}


def test_retiring_or_deleting_the_default_version_is_guarded(alice):
    upload(alice, OLD)
    upload(alice, BREAKING)
    versions.version_promote(version=version(2), actor=alice, force=True)  # callers now use version 2
    back = [
        "the default route: input 'features' removed (version 2 -> 1)",
        "the default route: input 'x' added and required (version 2 -> 1)",
        "the default route: output 'y' dimension 1 is 4, not 5 ([-1, 5] -> [-1, 4]) (version 2 -> 1)",
    ]
    for doing, call in (("retiring", versions.version_retire), ("deleting", versions.version_delete)):
        with pytest.raises(errors.SignatureConflict, match=f"^{doing} version 2 would break its callers") as refused:
            call(version=version(2), actor=alice)
        assert refused.value.differences == back
    assert (version(2).state, serving().default) == ("READY", 2)
    versions.version_retire(version=version(2), actor=alice, force=True)
    assert serving().default == 1
    event = AuditEvent.objects.get(model_name="g", version_number=2, action="version.retire")
    assert event.detail["forced"] is True and event.detail["differences"] == back


def test_a_restored_version_that_would_break_the_default_is_held_again(alice):
    upload(alice, OLD)
    upload(alice, BREAKING)  # held
    versions.version_retire(version=version(2), actor=alice)  # the default route stays on version 1
    assert (version(2).state, version(2).held, serving().default) == ("UNAVAILABLE", False, 1)
    restored = versions.version_restore(version=version(2), actor=alice)
    assert (restored.state, restored.held) == ("READY", True)
    assert serving().default == 1
    assert actions_of(2)[-2:] == ["version.restore", "version.held"]


def test_an_imported_ready_version_is_held_like_a_validated_one(alice):
    upload(alice, OLD)
    model = selectors.model_get("g")
    imported = states.version_create(
        model=model, artifact="x/model.onnx", sha256="ab" * 32, size=10, state="READY", uploaded_by=alice,
        inputs=[{"name": "features", "datatype": "FP32", "shape": [-1, 5]}],
        outputs=[{"name": "y", "datatype": "FP32", "shape": [-1, 5]}],
    )  # fmt: skip
    assert imported.held and imported.reason.startswith("held: ")
    assert serving().default == 1


def test_a_repository_load_config_is_guarded(alice):
    upload(alice, OLD)
    model_services.model_set_policy(model=selectors.model_get("g"), policy="specific", specific=[1], actor=alice)
    upload(alice, BREAKING)
    config = json.dumps({"name": "g", "version_policy": {"specific": {"versions": [2]}}})
    with pytest.raises(ConfigError, match="its version policy would break the default route's callers: "):
        model_services.model_load_config(model=selectors.model_get("g"), text=config, actor=alice)
    assert serving().default == 1


def test_the_api_shows_held_and_promotes_with_force(alice):
    upload(alice, OLD)
    upload(alice, BREAKING)
    client = Client()
    client.login(username="alice", password=PASSWORD)
    body = client.get("/api/models/g/versions/2/").json()
    assert (body["state"], body["held"], body["serving"]) == ("READY", True, False)
    refused = client.post("/api/models/g/versions/2/promote")
    assert refused.status_code == 409 and refused.json()["differences"] == DIFFERENCES
    assert client.post("/api/models/g/versions/2/promote?force=maybe").status_code == 400
    promoted = client.post("/api/models/g/versions/2/promote?force=true")
    assert promoted.status_code == 200 and promoted.json()["held"] is False and promoted.json()["serving"] is True
    assert client.post("/api/models/g/versions/2/retire").status_code == 409
    assert Client().post("/api/models/g/versions/2/promote?force=true").status_code in (401, 403)


def test_the_version_page_shows_why_and_its_own_control(alice):
    upload(alice, OLD)
    upload(alice, BREAKING)
    client = Client()
    client.login(username="alice", password=PASSWORD)
    page = client.get("/models/g/versions/2/").content.decode()
    assert 'id="held-badge"' in page and 'id="promote-version"' in page
    assert "So it is held" in page and "input &#x27;x&#x27; removed" in page
    refused = client.post("/models/g/versions/2/promote", {})
    text = refused.content.decode()
    assert refused.status_code == 409
    assert (
        "tick &quot;even if it breaks callers&quot; and submit again" in text and "send &quot;force&quot;" not in text
    )
    done = client.post("/models/g/versions/2/promote", {"force": "on"})
    assert done.status_code == 302 and not version(2).held


def test_the_cli_deletes_the_default_version_only_with_force(alice):
    upload(alice, OLD)
    upload(alice, BREAKING)
    versions.version_promote(version=version(2), actor=alice, force=True)
    with pytest.raises(CommandError, match="deleting version 2 would break its callers"):
        call_command("delete_version", "g", "2")
    call_command("delete_version", "g", "2", "--force")
    assert serving().default == 1
