"""The management API's webhooks: created with the secret shown once (and
never again), listed, deleted; deliveries with every attempt and its
answer; the redeliver action; a private address refused (400); another
team's webhooks out of reach (403 / 404); no credential, 401; audited."""

from __future__ import annotations

import pytest
from standardwebhooks import Webhook

from models_store.accounts import services as accounts
from models_store.intake import services as intake
from models_store.models import AuditEvent
from models_store.registry import models as registry_models
from models_store.registry.services import models as model_services
from models_store.webhooks import models as webhook_models
from tests.models_store.test_api import Api
from tests.support import onnx_models as m
from tests.support.store import person, stage
from tests.support.webhook_receiver import Receiver, deliver_inline

pytestmark = [pytest.mark.db, pytest.mark.django_db(transaction=True)]

HOOKS = "/api/teams/ml/webhooks/"


@pytest.fixture(autouse=True)
def _inline(settings, monkeypatch):
    deliver_inline(settings, monkeypatch, retry_max_seconds=0.1)


@pytest.fixture
def alice():
    user = person("alice", "ml")
    return user, Api(accounts.token_create(user=user, name="script")[1])


@pytest.fixture
def bob_api():
    return Api(accounts.token_create(user=person("bob", "vision"), name="script")[1])


def test_create_list_get_delete(alice):
    _user, api = alice
    answer = api.json("post", HOOKS, {"url": "http://127.0.0.1:9/in", "events": ["label.moved", "version.ready"]})
    assert answer.status_code == 201, answer.json()
    created = answer.json()
    assert created["secret"].startswith("whsec_") and created["team"] == "ml" and created["created_by"] == "alice"
    assert created["events"] == ["version.ready", "label.moved"]  # in the events' order
    listed = api.get(HOOKS).json()
    assert listed["count"] == 1 and "secret" not in listed["results"][0]
    one = api.get(f"{HOOKS}{created['id']}/").json()
    assert one["url"] == "http://127.0.0.1:9/in" and "secret" not in one
    paused = api.json("patch", f"{HOOKS}{created['id']}/", {"active": False, "events": ["model.deleted"]})
    assert paused.status_code == 200 and paused.json()["active"] is False
    assert paused.json()["events"] == ["model.deleted"]
    assert api.json("patch", f"{HOOKS}{created['id']}/", {"events": []}).status_code == 400
    assert api.json("delete", f"{HOOKS}{created['id']}/").status_code == 204
    assert api.get(f"{HOOKS}{created['id']}/").status_code == 404
    events = AuditEvent.objects.filter(action__startswith="webhook.").order_by("id")
    assert [(e.action, e.actor_name, e.detail["webhook"]) for e in events] == [
        ("webhook.create", "alice", created["id"]), ("webhook.update", "alice", created["id"]),
        ("webhook.delete", "alice", created["id"]),
    ]  # fmt: skip


@pytest.mark.parametrize(
    "body, words",
    [
        ({"url": "http://10.1.2.3/", "events": ["label.moved"]}, "private address"),
        ({"url": "http://localhost:8000/", "events": ["label.moved"]}, "loopback address"),
        ({"url": "http://169.254.169.254/", "events": ["label.moved"]}, "link-local address"),
        ({"url": "http://127.0.0.1/", "events": []}, "events"),
        ({"url": "http://127.0.0.1/", "events": ["nope"]}, "events"),
        ({"url": "not a url", "events": ["label.moved"]}, "url"),
    ],
)
def test_refusals_answer_400_with_an_error(alice, settings, body, words):
    settings.WEBHOOK_ALLOWED_HOSTS = []
    answer = alice[1].json("post", HOOKS, body)
    assert answer.status_code == 400 and words in answer.json()["error"], answer.json()
    assert not AuditEvent.objects.filter(action__startswith="webhook.").exists()


def test_the_url_shape_is_the_schemas_pattern_labels_of_at_most_63_characters(alice, settings):
    """What the schema's pattern refuses is a 400 on the field ``url``; what it allows is taken to the
    address check (a name that does not resolve: 400 saying so; an allowed address: 201)."""
    from models_store.webhooks import serializers as webhook_serializers
    from models_store.webhooks import targets

    settings.WEBHOOK_ALLOWED_HOSTS = ["127.0.0.1", "::1"]
    api = alice[1]
    label_63, label_64 = "a" * 63, "a" * 64
    for url in (f"http://{label_64}.example/", "http://127.0.0.1:65536/", "ftp://127.0.0.1/", "http://[:::]/",
                "http://127.0.0.1/a b", " http://127.0.0.1/", "http://user@127.0.0.1/"):  # fmt: skip
        answer = api.json("post", HOOKS, {"url": url, "events": ["label.moved"]})
        assert answer.status_code == 400 and answer.json()["fields"] == {"url": [targets.URL_SHAPE]}, (url, answer)
    answer = api.json("post", HOOKS, {"url": f"http://{label_63}.invalid/", "events": ["label.moved"]})
    assert answer.status_code == 400 and "fields" not in answer.json()
    assert answer.json()["error"].startswith(f"the host '{label_63}.invalid' does not resolve")
    for url in ("http://127.0.0.1:65535/x?y=1#z", "http://[::1]:8080/"):
        assert api.json("post", HOOKS, {"url": url, "events": ["label.moved"]}).status_code == 201, url
    assert webhook_serializers.MAX_URL_CHARS == webhook_models.WebhookSubscription._meta.get_field("url").max_length


def test_deliveries_show_every_attempt_and_redeliver_sends_again(alice):
    _user, api = alice
    with Receiver([500]) as hooks:
        created = api.json("post", HOOKS, {"url": hooks.url, "events": ["version.ready"]}).json()
        assert api.upload("m", m.affine(2.0, 0.0), team="ml").status_code == 201
        hooks.wait_for(2)
        page = api.get(f"{HOOKS}{created['id']}/deliveries/").json()
        (delivery,) = page["results"]
        assert delivery["event"] == "version.ready" and delivery["model"] == "m" and delivery["state"] == "SUCCEEDED"
        assert [(a["number"], a["status_code"], a["response_body"]) for a in delivery["attempts"]] == [
            (1, 500, "answer 500 to request 1"), (2, 200, "answer 200 to request 2"),
        ]  # fmt: skip
        assert delivery["payload"]["data"]["version"] == 1
        answer = api.json("post", f"{HOOKS}{created['id']}/deliveries/{delivery['id']}/redeliver")
        assert answer.status_code == 202, answer.json()
        received = hooks.wait_for(3)
    assert {r.headers["webhook-id"] for r in received} == {delivery["message_id"]}
    assert Webhook(created["secret"]).verify(received[2].body, received[2].headers)["type"] == "version.ready"
    attempts = api.get(f"{HOOKS}{created['id']}/deliveries/").json()["results"][0]["attempts"]
    assert [(a["status_code"], a["requested_by"]) for a in attempts] == [(500, ""), (200, ""), (200, "alice")]
    assert AuditEvent.objects.get(action="webhook.redeliver").actor_name == "alice"


def test_another_team_cannot_see_or_change_them(alice, bob_api, settings):
    settings.WEBHOOK_RETRY_WINDOW_SECONDS = 0.2  # nothing listens on port 9
    user, api = alice
    created = api.json("post", HOOKS, {"url": "http://127.0.0.1:9/", "events": ["model.deleted"]}).json()
    intake.version_upload(model_name="m", staged=stage(m.affine(1.0, 0.0)), actor=user, team=user.teams.get())
    model_services.model_delete(model=registry_models.RegisteredModel.objects.get(name="m"), actor=user)
    delivery = webhook_models.WebhookDelivery.objects.get()
    for method, path in (
        ("get", HOOKS), ("post", HOOKS), ("get", f"{HOOKS}{created['id']}/"), ("delete", f"{HOOKS}{created['id']}/"),
        ("patch", f"{HOOKS}{created['id']}/"),
        ("get", f"{HOOKS}{created['id']}/deliveries/"),
        ("post", f"{HOOKS}{created['id']}/deliveries/{delivery.pk}/redeliver"),
    ):  # fmt: skip
        body = {"url": "http://127.0.0.1:9/", "events": ["model.deleted"]} if method == "post" else {"active": False}
        answer = bob_api.json(method, path, body)
        assert answer.status_code == 403 and "not a member of team ml" in answer.json()["error"], (method, path)
    # Bob's own team has none of them; ids of another team's webhooks are not found there.
    assert bob_api.get("/api/teams/vision/webhooks/").json()["count"] == 0
    assert bob_api.get(f"/api/teams/vision/webhooks/{created['id']}/").status_code == 404
    assert bob_api.get("/api/teams/nope/webhooks/").status_code == 404
    # A token limited to another team of alice's is refused too; without a credential, 401.
    both = person("carol", "ml", "vision")
    team_token = accounts.token_create(user=both, name="vision only", team=both.teams.get(name="vision"))[1]
    assert Api(team_token).get(HOOKS).status_code == 403
    assert Api("nope").get(HOOKS).status_code == 401
    assert api.get(f"{HOOKS}{created['id']}/").status_code == 200
