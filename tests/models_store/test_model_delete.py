"""Deleting a model (``DELETE /api/models/<m>/`` and the web UI's
confirmation page): every version and its file goes, as a version delete
removes it; audited with the actor; a ``model.deleted`` webhook event;
409 naming each reason while a READY ensemble runs a version, the traffic
split sends requests to a label, a rollout runs or shadow traffic is on;
a webhook delivery of the deleted model names it without a link."""

from __future__ import annotations

import pytest
from django.test import Client

from models_store import storage
from models_store.intake.repository import import_repository
from models_store.models import AuditEvent, ModelVersion, RegisteredModel, Rollout, WebhookDelivery
from models_store.webhooks import delivery as webhook_delivery
from models_store.webhooks import services as webhook_services
from tests.models_store.test_api import Api, _error
from tests.support import onnx_models as m
from tests.support.repository import write_ensembles
from tests.support.store import person

pytestmark = [pytest.mark.db, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def alice(settings, monkeypatch):
    """alice (owner of team ml) with an API token; deliveries are recorded, not sent."""
    settings.WEBHOOK_ALLOWED_HOSTS = ["127.0.0.1"]
    monkeypatch.setattr(webhook_delivery, "_start_timer", lambda delay, delivery_id: None)
    user = person("alice", "ml")
    from models_store.accounts import services as accounts

    return user, Api(accounts.token_create(user=user, name="script")[1])


def _upload(api: Api, model: str, *scales: float, team: str = "ml") -> list[dict]:
    answers = []
    for scale in scales:
        response = api.upload(model, m.affine(scale, 1.0), team=team)
        assert response.status_code == 201, response.content
        answers.append(response.json())
    return answers


def test_delete_removes_every_version_file_audits_and_sends_model_deleted(alice):
    user, api = alice
    team = user.teams.get()
    hook = webhook_services.subscription_create(
        team=team, url="http://127.0.0.1:9/hook", events=["model.deleted"], actor=user
    )
    versions = _upload(api, "doomed", 2.0, 3.0, 4.0)
    assert [v["number"] for v in versions] == [1, 2, 3]
    paths = [storage.artifact_path(v.artifact) for v in ModelVersion.objects.filter(model__name="doomed")]
    assert len(paths) == 3 and all(p.exists() for p in paths)
    assert api.json("put", "/api/models/doomed/labels/old/", {"version": 1}).status_code == 200

    response = api.client.delete("/api/models/doomed/", **api.auth)
    assert response.status_code == 204 and response.content == b""
    assert not RegisteredModel.objects.filter(name="doomed").exists()
    assert ModelVersion.objects.filter(model__name="doomed").count() == 0
    assert [p.exists() for p in paths] == [False, False, False]
    assert api.get("/api/models/doomed/").status_code == 404
    assert _error(api.client.delete("/api/models/doomed/", **api.auth), 404) == "unknown model 'doomed'"

    events = AuditEvent.objects.filter(model_name="doomed").order_by("pk")
    deleted = [(e.action, e.version_number, e.actor_name) for e in events if e.action.endswith(".delete")]
    assert deleted == [("version.delete", 3, "alice"), ("version.delete", 2, "alice"),
                       ("version.delete", 1, "alice"), ("model.delete", None, "alice")]  # fmt: skip
    assert events.get(action="model.delete").detail == {"team": "ml"}
    sent = WebhookDelivery.objects.get(subscription=hook)
    assert (sent.event, sent.model_name) == ("model.deleted", "doomed")
    assert sent.payload["type"] == "model.deleted"
    assert sent.payload["data"] == {"model": "doomed", "team": "ml", "actor": "alice"}

    # The name is free again: an upload creates a new model whose versions start at 1.
    assert _upload(api, "doomed", 5.0)[0]["number"] == 1


def test_delete_is_refused_while_the_split_a_rollout_or_shadow_traffic_uses_the_model(alice):
    _user, api = alice
    _upload(api, "busy", 2.0, 3.0, 4.0)
    for label, number in (("stable", 1), ("canary", 2)):
        assert api.json("put", f"/api/models/busy/labels/{label}/", {"version": number}).status_code == 200
    assert api.json("put", "/api/models/busy/traffic/", {"weights": {"stable": 90, "canary": 10}}).status_code == 200
    assert api.json("put", "/api/models/busy/shadow/", {"version": 3, "percent": 25}).status_code == 200
    model = RegisteredModel.objects.get(name="busy")
    Rollout.objects.create(model=model, canary_version=2, stable_version=1, steps=[50, 100])

    error = _error(api.client.delete("/api/models/busy/", **api.auth), 409)
    assert error == (
        "the traffic split of 'busy' sends 10% of its requests to label 'canary'; change the split first "
        "the traffic split of 'busy' sends 90% of its requests to label 'stable'; change the split first "
        "a rollout of version 2 of 'busy' is running; abort it (or let it end) first "
        "'busy' sends shadow traffic to version 3; stop it first"
    )
    # Nothing changed: every version, file, label, the split and the shadow are still there.
    model.refresh_from_db()
    assert sorted(model.versions.values_list("number", flat=True)) == [1, 2, 3]
    assert all(storage.artifact_path(v.artifact).exists() for v in model.versions.all())
    assert (model.traffic, model.shadow_version.number, model.shadow_percent) == ({"canary": 10, "stable": 90}, 3, 25)
    assert not AuditEvent.objects.filter(action="model.delete").exists()

    # Cleared one at a time, each reason leaves the answer.
    assert api.json("put", "/api/models/busy/traffic/", {"weights": {}}).status_code == 200
    error = _error(api.client.delete("/api/models/busy/", **api.auth), 409)
    assert "traffic split" not in error and "rollout of version 2" in error and "shadow traffic" in error
    rollout = Rollout.objects.get(model=model)
    assert api.json("post", f"/api/models/busy/rollouts/{rollout.pk}/abort", {}).status_code == 200
    assert api.client.delete("/api/models/busy/shadow/", **api.auth).status_code == 204
    # The abort sent every request to stable (a split {"stable": 100}): that is a split too.
    error = _error(api.client.delete("/api/models/busy/", **api.auth), 409)
    assert error == "the traffic split of 'busy' sends 100% of its requests to label 'stable'; change the split first"
    assert api.json("put", "/api/models/busy/traffic/", {"weights": {}}).status_code == 200
    response = api.client.delete("/api/models/busy/", **api.auth)
    assert response.status_code == 204, response.content
    assert not RegisteredModel.objects.filter(name="busy").exists()
    assert not Rollout.objects.exists()  # its history goes with it


def test_delete_is_refused_while_a_ready_ensemble_runs_a_version(tmp_path):
    repo = tmp_path / "repo"
    write_ensembles(repo)
    import_repository(repo)
    from models_store.accounts import services as accounts

    ops = Api(accounts.token_create(user=person("root", superuser=True), name="ops")[1])
    error = _error(ops.client.delete("/api/models/ens_postprocess/", **ops.auth), 409)
    assert "step 3 of ensemble 'ens_pipeline' (version 1, READY); to delete the model" in error, error
    assert RegisteredModel.objects.filter(name="ens_postprocess").exists()
    # The ensemble itself may go (nothing runs it), then the model it ran: its version files with it.
    files = [storage.artifact_path(v.artifact) for v in ModelVersion.objects.filter(model__name="ens_postprocess")]
    assert files and all(f.exists() for f in files)
    assert ops.client.delete("/api/models/ens_pipeline/", **ops.auth).status_code == 204
    assert ops.client.delete("/api/models/ens_postprocess/", **ops.auth).status_code == 204
    assert [f.exists() for f in files] == [False] * len(files)
    # ens_preprocess still runs in ens_diamond (and ens_failing when READY): refused, naming it.
    error = _error(ops.client.delete("/api/models/ens_preprocess/", **ops.auth), 409)
    assert "step 1 of ensemble 'ens_diamond' (version 1, READY)" in error and "ens_pipeline" not in error, error


def test_roles_viewers_may_not_delete_and_other_teams_do_not_see_it(alice, settings):
    settings.INFERENCE_REQUIRE_TOKEN = True
    user, api = alice
    _upload(api, "kept", 2.0)
    from models_store.accounts import services as accounts
    from models_store.accounts.models import Role

    viewer = person("vic", "ml")
    accounts.membership_add(team=user.teams.get(), user=viewer, role=Role.VIEWER)
    vic = Api(accounts.token_create(user=viewer, name="v")[1])
    bob = Api(accounts.token_create(user=person("bob", "vision"), name="b")[1])
    assert "model.delete needs the maintainer role in team ml; yours is viewer" in _error(
        vic.client.delete("/api/models/kept/", **vic.auth), 403
    )
    assert _error(bob.client.delete("/api/models/kept/", **bob.auth), 404) == "unknown model 'kept'"
    assert _error(Client().delete("/api/models/kept/"), 401)
    assert RegisteredModel.objects.filter(name="kept").exists()


def test_the_web_ui_confirms_lists_what_goes_then_deletes(alice):
    user, api = alice
    _upload(api, "shown", 2.0, 3.0)
    assert api.json("put", "/api/models/shown/labels/stable/", {"version": 2}).status_code == 200
    assert api.json("put", "/api/models/shown/traffic/", {"weights": {"stable": 100}}).status_code == 200
    browser = Client()
    browser.force_login(user)
    page = browser.get("/models/shown/")
    assert b'href="/models/shown/delete"' in page.content
    # A split sends requests to it: the page says why, and offers no button.
    page = browser.get("/models/shown/delete").content.decode()
    assert "sends 100% of its requests to label &#x27;stable&#x27;" in page and "model-delete-confirm" not in page
    response = browser.post("/models/shown/delete")
    assert response.status_code == 409 and b"change the split first" in response.content
    assert RegisteredModel.objects.filter(name="shown").exists()

    assert api.json("put", "/api/models/shown/traffic/", {"weights": {}}).status_code == 200
    page = browser.get("/models/shown/delete").content.decode()
    assert "2 versions (v2 READY, v1 READY) and their model files" in page and "<code>stable</code>" in page
    response = browser.post("/models/shown/delete", follow=True)
    assert response.redirect_chain == [("/models/", 302)]
    assert b"Deleted model shown with its versions and their files." in response.content
    assert not RegisteredModel.objects.filter(name="shown").exists()
    event = AuditEvent.objects.get(action="model.delete", model_name="shown")
    assert event.actor_name == "alice"


def test_a_delivery_of_a_deleted_model_names_it_without_a_link(alice):
    user, api = alice
    hook = webhook_services.subscription_create(
        team=user.teams.get(), url="http://127.0.0.1:9/hook", events=["version.ready", "model.deleted"], actor=user
    )
    _upload(api, "gone", 2.0)
    _upload(api, "here", 3.0)
    assert api.client.delete("/api/models/gone/", **api.auth).status_code == 204
    browser = Client()
    browser.force_login(user)
    page = browser.get(f"/webhooks/{hook.pk}/").content.decode()
    assert page.count('<a href="/models/gone/">') == 0 and page.count('gone <span class="muted">(deleted)</span>') == 2
    assert page.count('<a href="/models/here/">here</a>') == 1
    # Redeliver answers in place for site.js (JSON), and with a redirect and a message without it.
    delivery = WebhookDelivery.objects.filter(subscription=hook, model_name="gone").first()
    path = f"/webhooks/{hook.pk}/deliveries/{delivery.pk}/redeliver"
    answer = browser.post(path, HTTP_ACCEPT="application/json")
    assert answer.status_code == 202
    assert answer.json() == {"message": f"Sending {delivery.event} ({delivery.message_id}) again.", "state": "PENDING"}
    assert browser.post(path).status_code == 302
