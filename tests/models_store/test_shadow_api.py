"""Shadow traffic in the registry: set and cleared through the management
API and the web UI (a credential, the team's right, audited with the
actor, 4xx ``{"error"}`` for bad input), carried to the serving side (the
shadow version serves, never as the default), and the comparison read
back summed over every process's rows (runs on SQLite and PostgreSQL)."""

from __future__ import annotations

import time

import pytest
from django.test import Client

from inference.models import ShadowRollupRow
from models_store.accounts import services as accounts
from models_store.intake import services as intake
from models_store.models import AuditEvent, RegisteredModel, RegistryStamp
from models_store.registry import selectors
from models_store.registry.services import models as model_services
from models_store.registry.services import versions
from tests.support import onnx_models as m
from tests.support.store import PASSWORD, person, stage

pytestmark = [pytest.mark.db, pytest.mark.django_db(transaction=True)]
SHADOW = "/api/models/m/shadow/"


class Api:
    def __init__(self, token: str | None):
        self.client = Client()
        self.auth = {"HTTP_AUTHORIZATION": f"Bearer {token}"} if token else {}

    def call(self, method: str, path: str, body=None):
        return getattr(self.client, method)(path, body, content_type="application/json", **self.auth)


@pytest.fixture
def alice():
    """Model "m" of team ml: versions 1 (served: policy specific [1]) and 2 READY, 3 FAILED; alice's API."""
    user = person("alice", "ml")
    team = user.teams.get()
    for payload in (m.affine(1.0, 0.0), m.affine(2.0, 0.0), m.failing_model()):
        intake.version_upload(model_name="m", staged=stage(payload), actor=user, team=team)
    model_services.model_set_policy(model=selectors.model_get("m"), policy="specific", specific=[1], actor=user)
    return Api(accounts.token_create(user=user, name="script")[1])


def _error(response, status: int) -> str:
    assert response.status_code == status, response.content
    body = response.json()
    assert set(body) <= {"error", "fields"} and body["error"], body
    return body["error"]


def test_set_carried_to_serving_and_cleared_with_audit(alice):
    stamp = RegistryStamp.objects.get(pk=1).counter
    answer = alice.call("put", SHADOW, {"version": 2, "percent": 25})
    assert answer.status_code == 200, answer.content
    assert answer.json()["shadow"] == {"version": 2, "percent": 25.0, "serving": True}
    assert RegistryStamp.objects.get(pk=1).counter > stamp
    model = selectors.model_detail("m")
    record = selectors.model_record(model)
    assert (record.shadow_version, record.shadow_percent) == (2, 25.0)
    state = selectors.serving(model)
    assert state.served == (2, 1) and state.default == 1 and state.shadow == 2  # it serves, never as the default
    event = AuditEvent.objects.filter(action="shadow.set").latest("id")
    assert (event.actor_name, event.version_number, event.detail) == ("alice", 2, {"percent": 25.0, "before": None})
    assert alice.call("delete", SHADOW).status_code == 204
    event = AuditEvent.objects.filter(action="shadow.clear").latest("id")
    assert event.actor_name == "alice" and event.detail["before"] == {"version": 2, "percent": 25.0}
    assert selectors.serving(selectors.model_detail("m")).served == (1,)
    assert _error(alice.call("delete", SHADOW), 404) == "model 'm' has no shadow traffic"


@pytest.mark.parametrize(
    "body, status, words",
    [
        ({"version": 9, "percent": 10}, 409, "model 'm' has no version 9"),
        ({"version": 3, "percent": 10}, 409, "only go to a READY version; version 3 of 'm' is FAILED"),
        ({"version": 1, "percent": 10}, 409, "version 1 of 'm' is what requests that name no version get now"),
        ({"version": 2, "percent": 101}, 400, "percent"),
        ({"version": 2, "percent": -0.5}, 400, "percent"),
        ({"version": 2, "percent": "10"}, 400, "percent"),
        ({"percent": 10}, 400, "version"),
        ({"version": 0, "percent": 10}, 400, "version"),
    ],
)
def test_bad_input_is_a_4xx_with_an_error(alice, body, status, words):
    assert words in _error(alice.call("put", SHADOW, body), status)
    assert selectors.model_get("m").shadow_version_id is None


def test_a_credential_and_the_teams_right_are_required(alice):
    assert Api(None).call("put", SHADOW, {"version": 2, "percent": 10}).status_code == 401
    assert Api(None).call("get", SHADOW).status_code == 401
    bob = Api(accounts.token_create(user=person("bob", "vision"), name="script")[1])
    assert bob.call("put", SHADOW, {"version": 2, "percent": 10}).status_code == 403
    assert bob.call("delete", SHADOW).status_code == 403
    assert not AuditEvent.objects.filter(action__startswith="shadow.").exists()


def test_the_split_s_versions_are_the_default_route(alice):
    assert alice.call("put", "/api/models/m/labels/stable/", {"version": 1}).status_code == 200
    assert alice.call("put", "/api/models/m/labels/canary/", {"version": 2}).status_code == 200
    answer = alice.call("put", "/api/models/m/traffic/", {"weights": {"stable": 90, "canary": 10}})
    assert answer.status_code == 200, answer.content
    assert "version 2 of 'm' is what requests" in _error(alice.call("put", SHADOW, {"version": 2, "percent": 5}), 409)


def test_deleting_the_shadow_version_ends_the_shadow_traffic(alice):
    assert alice.call("put", SHADOW, {"version": 2, "percent": 100}).status_code == 200
    model = selectors.model_get("m")
    versions.version_delete(version=selectors.version_get(model, 2), actor=None)
    assert alice.call("get", SHADOW).json()["shadow"] is None
    assert selectors.model_record(selectors.model_detail("m")).shadow_version is None


def _row(minute, writer, requests, outputs, errors=0, dropped=0, busy=0):
    ShadowRollupRow.objects.create(
        minute=minute, model_name="m", version=2, writer=writer, requests=requests, errors=errors,
        dropped=dropped, busy=busy, outputs=outputs,
    )  # fmt: skip


def test_the_comparison_sums_every_process_s_rows(alice):
    """Two processes' rows of one minute and one of the minute before:
    counts add, maxima take the larger, shares come from the sums."""
    assert alice.call("put", SHADOW, {"version": 2, "percent": 100}).status_code == 200
    now = int(time.time() // 60)
    y1 = {"compared": 3, "exact": 1, "elements": 12, "abs_sum": 6.0, "max_abs": 2.0, "rows": 3, "agree": 2}
    y2 = {"compared": 2, "exact": 2, "elements": 8, "abs_sum": 0.0, "max_abs": 0.0, "rows": 2, "agree": 2}
    y3 = {"compared": 1, "exact": 0, "mismatched": 1}
    _row(now, "a-1", 3, {"y": y1}, errors=1)
    _row(now, "b-2", 2, {"y": y2}, dropped=4)
    _row(now - 1, "a-1", 1, {"y": y3}, busy=2)
    _row(now - 90, "a-1", 7, {"y": y1})  # outside the hour
    report = alice.call("get", SHADOW).json()
    assert (report["version"], report["requests"], report["errors"], report["dropped"], report["busy"]) == (
        2, 6, 1, 4, 2,
    )  # fmt: skip
    assert report["outputs"]["y"] == {
        "compared": 6, "exact_matches": 3, "exact_match_share": 0.5, "mismatched_shapes": 1, "elements": 20,
        "max_abs_diff": 2.0, "mean_abs_diff": 0.3, "nonfinite_diffs": 0, "argmax_rows": 5, "argmax_agreement": 0.8,
    }  # fmt: skip
    series = report["series"]
    assert series["requests"][-1] == 5 and series["requests"][-2] == 1 and sum(series["requests"]) == 6
    assert series["outputs"]["y"]["exact_match_share"][-1] == 3 / 5
    assert series["outputs"]["y"]["argmax_agreement"][-2] is None
    day = alice.call("get", f"{SHADOW}?range=day").json()
    assert day["requests"] == 13 and day["step_seconds"] == 300
    assert _error(alice.call("get", f"{SHADOW}?range=year"), 400).startswith("unknown range 'year'")
    assert "version" in _error(alice.call("get", f"{SHADOW}?version=x"), 400)
    assert alice.call("get", f"{SHADOW}?version=1").json()["requests"] == 0


def test_the_web_ui_sets_shows_and_stops_it(alice):
    client = Client()
    assert client.login(username="alice", password=PASSWORD)
    page = client.get("/models/m/").content.decode()
    assert 'id="shadow-form"' in page and "Start shadow traffic" in page
    refused = client.post("/models/m/shadow", {"version": "1", "percent": "10"})
    assert refused.status_code == 409 and "what requests that name no version get now" in refused.content.decode()
    assert client.post("/models/m/shadow", {"version": "2", "percent": "150"}).status_code == 400
    assert client.post("/models/m/shadow", {"version": "2", "percent": "10"}).status_code == 302
    assert RegisteredModel.objects.get(name="m").shadow_percent == 10.0
    assert AuditEvent.objects.filter(action="shadow.set").latest("id").actor_name == "alice"
    page = client.get("/models/m/").content.decode()
    assert "gets a copy of 10.0% of the requests" in page and 'id="shadow-stop"' in page
    version_page = client.get("/models/m/versions/2/").content.decode()
    assert 'id="shadow-table"' in version_page and "models_store/shadow.js" in version_page
    assert 'id="shadow-table"' not in client.get("/models/m/versions/1/").content.decode()
    data = client.get("/models/m/versions/2/shadow.json").json()
    assert data["version"] == 2 and data["shadow"]["percent"] == 10.0
    assert client.get("/models/m/versions/2/shadow.json?range=x").status_code == 400
    assert client.post("/models/m/shadow/stop").status_code == 302
    assert AuditEvent.objects.filter(action="shadow.clear").latest("id").actor_name == "alice"
