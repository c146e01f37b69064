"""The signature guard: a label move, a traffic split or a version policy
that would make a route serve a version whose signature breaks its callers
is refused (409, with the differences) unless forced (audited as forced);
compatible changes pass. Over the services, the management API, the web UI
and the CLI (runs on SQLite and on PostgreSQL)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from django.core.management import CommandError, call_command
from django.test import Client

from models_store import errors
from models_store.accounts import services as accounts
from models_store.intake import services as intake
from models_store.models import AuditEvent
from models_store.registry import selectors
from models_store.registry.services import models as model_services
from models_store.registry.services import routes
from models_store.registry.signature_guard import breaking_changes
from tests.support import onnx_models as m
from tests.support.store import PASSWORD, person, stage

pytestmark = [pytest.mark.db, pytest.mark.django_db(transaction=True)]

BASE = ([("x", "FP32", ("N", 4))], [("y", "FP32")])


tensors_model = m.passthrough


#: name -> (the second version's signature, the differences expected; [] compatible)
CHANGES = {
    "input renamed": (([("z", "FP32", ("N", 4))], [("y", "FP32")]), ["input 'x' removed", "input 'z' added"]),
    "datatype changed": (([("x", "FP64", ("N", 4))], [("y", "FP64")]), ["input 'x' is FP64, not FP32"]),
    "fixed dimension changed": (([("x", "FP32", ("N", 5))], [("y", "FP32")]), ["input 'x' dimension 1 is 5, not 4"]),
    "variable dimension fixed": (([("x", "FP32", (2, 4))], [("y", "FP32")]), ["dimension 0 is 2, not variable"]),
    "required input added": (
        ([("x", "FP32", ("N", 4)), ("w", "FP32", ("N", 4))], [("y", "FP32")]),
        ["input 'w' added and required"],
    ),
    "output removed": (([("x", "FP32", ("N", 4))], [("y2", "FP32")]), ["output 'y' removed"]),
    "output added": (([("x", "FP32", ("N", 4))], [("y", "FP32"), ("y2", "FP32")]), []),
    "fixed dimension relaxed": (([("x", "FP32", ("N", "M"))], [("y", "FP32")]), []),
}


def two_versions(change: str):
    """Model "g" of team ml: version 1 with BASE, version 2 with the change;
    label stable -> 1 and canary -> 2 (labels are set before the guard
    applies: a new label has no callers yet)."""
    alice = person("alice", "ml")
    team = alice.teams.get()
    intake.version_upload(model_name="g", staged=stage(tensors_model(*BASE)), actor=alice, team=team)
    model_services.model_set_policy(
        model=selectors.model_get("g"), policy="specific", specific=[1], actor=alice
    )  # v1 serves the default route, and the policy will not choose version 2 (so it is not held)
    intake.version_upload(model_name="g", staged=stage(tensors_model(*CHANGES[change][0])), actor=alice)
    model = selectors.model_get("g")
    assert [(v.state, v.held) for v in model.versions.order_by("number")] == [("READY", False), ("READY", False)], [
        (v.number, v.reason) for v in model.versions.all()
    ]
    routes.label_set(model=model, name="stable", number=1, actor=alice)
    routes.label_set(model=model, name="canary", number=2, actor=alice)
    return selectors.model_get("g"), alice


def test_the_rules_on_stored_signatures():
    def sig(inputs, outputs):
        return SimpleNamespace(
            inputs=[{"name": n, "datatype": d, "shape": s} for n, d, s in inputs],
            outputs=[{"name": n, "datatype": d, "shape": s} for n, d, s in outputs],
        )

    v1 = sig([("x", "FP32", [-1, 4])], [("y", "FP32", [-1, 3])])
    assert (
        breaking_changes(v1, sig([("x", "FP32", [-1, 4]), ("mask", "BOOL", [-1])], [("y", "FP32", [-1, 3])]), {"mask"})
        == []
    )
    assert breaking_changes(v1, sig([("x", "FP32", [-1, 4, 1])], [("y", "FP32", [-1, 3])])) == [
        "input 'x' has 3 dimensions, not 2 ([-1, 4] -> [-1, 4, 1])"
    ]
    assert breaking_changes(v1, sig([("x", "FP32", [-1, 4])], [("y", "FP16", [-1, 3])])) == [
        "output 'y' is FP16, not FP32"
    ]
    assert breaking_changes(v1, sig([("x", "FP32", [-1, -1])], [("y", "FP32", [-1, 3]), ("p", "INT64", [-1])])) == []


@pytest.mark.parametrize("change", sorted(CHANGES))
def test_a_label_move_is_guarded(change):
    model, alice = two_versions(change)
    expected = CHANGES[change][1]
    if not expected:
        routes.label_set(model=model, name="stable", number=2, actor=alice)  # compatible: moves
        assert selectors.label_numbers(selectors.model_get("g"))["stable"] == 2
        assert "forced" not in AuditEvent.objects.filter(action="label.set").latest("id").detail
        return
    with pytest.raises(errors.SignatureConflict) as refused:
        routes.label_set(model=model, name="stable", number=2, actor=alice)
    assert refused.value.differences and all(d.startswith("label 'stable': ") for d in refused.value.differences)
    for words in expected:
        assert any(words in d for d in refused.value.differences), (words, refused.value.differences)
    assert "moving label 'stable' from version 1 to 2 would break its callers" in str(refused.value)
    assert selectors.label_numbers(selectors.model_get("g"))["stable"] == 1  # nothing changed
    routes.label_set(model=model, name="stable", number=2, actor=alice, force=True)
    event = AuditEvent.objects.filter(action="label.set").latest("id")
    assert event.detail["forced"] is True and event.detail["differences"] == refused.value.differences
    assert selectors.label_numbers(selectors.model_get("g"))["stable"] == 2


def test_the_default_route_is_guarded_by_the_split_the_policy_and_promote():
    model, alice = two_versions("datatype changed")
    for change in (
        lambda force: routes.traffic_set(model=model, weights={"stable": 90, "canary": 10}, actor=alice, force=force),
        lambda force: model_services.model_set_policy(model=model, policy="latest", latest=1, actor=alice, force=force),
    ):
        with pytest.raises(errors.SignatureConflict, match="the default route: input 'x' is FP64, not FP32"):
            change(False)
    assert selectors.model_get("g").traffic == {} and list(selectors.serving(selectors.model_detail("g")).served) == [1]
    routes.traffic_set(model=model, weights={"stable": 90, "canary": 10}, actor=alice, force=True)
    assert AuditEvent.objects.filter(action="traffic.set").latest("id").detail["forced"] is True
    # Promoting moves 'stable', whose callers (naming the label) never saw version 2.
    with pytest.raises(errors.SignatureConflict, match="promoting: moving label 'stable' from version 1 to 2"):
        routes.traffic_promote(model=model, actor=alice)
    routes.traffic_promote(model=model, actor=alice, force=True)
    assert AuditEvent.objects.filter(action="traffic.promote").latest("id").detail["forced"] is True


def test_a_compatible_split_and_policy_pass():
    model, alice = two_versions("output added")
    routes.traffic_set(model=model, weights={"stable": 50, "canary": 50}, actor=alice)
    routes.traffic_set(model=model, weights={}, actor=alice)
    model_services.model_set_policy(model=model, policy="latest", latest=1, actor=alice)
    assert list(selectors.serving(selectors.model_detail("g")).served) == [2]


def test_the_management_api_answers_409_with_the_differences():
    _, alice = two_versions("fixed dimension changed")
    api = Client(HTTP_AUTHORIZATION=f"Bearer {accounts.token_create(user=alice, name='ci')[1]}")

    def put(path, body):
        return api.put(path, json.dumps(body), content_type="application/json")

    refused = put("/api/models/g/labels/stable/", {"version": 2})
    assert refused.status_code == 409
    body = refused.json()
    assert body["differences"] == [
        "label 'stable': input 'x' dimension 1 is 5, not 4 ([-1, 4] -> [-1, 5]) (version 1 -> 2)",
        "label 'stable': output 'y' dimension 1 is 5, not 4 ([-1, 4] -> [-1, 5]) (version 1 -> 2)",
    ]
    assert '"force": true' in body["error"]
    refused = put("/api/models/g/traffic/", {"weights": {"stable": 50, "canary": 50}})
    assert refused.status_code == 409 and "the default route" in refused.json()["differences"][0]
    patch = api.patch("/api/models/g/", json.dumps({"version_policy": "all"}), content_type="application/json")
    assert patch.status_code == 409 and patch.json()["differences"]
    assert api.post("/api/models/g/traffic/promote").status_code == 409
    assert api.post("/api/models/g/traffic/promote?force=maybe").status_code == 400
    assert put("/api/models/g/labels/stable/", {"version": 2, "force": True}).status_code == 200
    assert api.get("/api/models/g/").json()["labels"]["stable"] == 2
    events = api.get("/api/models/g/audit/").json()["results"]
    assert events[0]["action"] == "label.set" and events[0]["detail"]["forced"] is True


def test_the_web_ui_refuses_and_forces_and_the_version_page_shows_the_difference():
    two_versions("required input added")
    browser = Client()
    assert browser.login(username="alice", password=PASSWORD)
    page = browser.get("/models/g/versions/2/").content.decode()
    assert 'id="signature-compared"' in page and "input &#x27;w&#x27; added and required" in page
    assert "Compared with version 1" in page
    assert "Compatible with version 1" not in browser.get("/models/g/versions/2/").content.decode()
    refused = browser.post("/models/g/labels", {"label": "stable", "version": 2})
    assert refused.status_code == 409 and "would break its callers" in refused.content.decode()
    forced = browser.post("/models/g/labels", {"label": "stable", "version": 2, "force": "on"})
    assert forced.status_code == 302
    assert selectors.label_numbers(selectors.model_get("g"))["stable"] == 2


def test_the_cli_refuses_unless_forced(capsys):
    two_versions("output removed")
    with pytest.raises(CommandError, match="output 'y' removed"):
        call_command("label", "g", "stable", "2")
    call_command("label", "g", "stable", "2", "--force")
    assert "g@stable -> version 2" in capsys.readouterr().out
    event = AuditEvent.objects.filter(action="label.set").latest("id")
    assert event.detail["forced"] is True and event.actor_name == "system"
