"""The management API's rollouts: started (201, the first step's split
set), listed and read with their steps; paused, resumed and aborted; bad
input 400 and refusals 409 with ``{"error": ...}``, never a 500; another
team's model 403 for a change; no credential 401."""

from __future__ import annotations

import pytest
from django.test import Client

from models_store.accounts import services as accounts
from models_store.intake import services as intake
from models_store.registry import selectors
from models_store.registry.services import routes
from tests.models_store.test_api import Api
from tests.support import onnx_models as m
from tests.support.store import person, stage

pytestmark = [pytest.mark.db, pytest.mark.django_db(transaction=True)]

ROLLOUTS = "/api/models/m/rollouts/"


@pytest.fixture
def alice():
    """alice of team ml, model "m" with versions 1 (stable) and 2, READY."""
    user = person("alice", "ml")
    for scale in (1.0, 2.0):
        intake.version_upload(model_name="m", staged=stage(m.affine(scale, 0.0)), actor=user, team=user.teams.get())
    routes.label_set(model=selectors.model_get("m"), name="stable", number=1, actor=user)
    return Api(accounts.token_create(user=user, name="script")[1])


def test_start_read_pause_resume_abort(alice):
    answer = alice.json("post", ROLLOUTS, {"canary_version": 2, "steps": [20, 100], "pause_seconds": 60})
    assert answer.status_code == 201, answer.json()
    rollout = answer.json()
    assert (rollout["state"], rollout["step"], rollout["weight"], rollout["stable_version"]) == ("running", 0, 20, 1)
    assert rollout["started_by"] == "alice" and rollout["analyses"] == [] and rollout["max_error_rate"] == 0.05
    assert selectors.model_get("m").traffic == {"canary": 20, "stable": 80}
    listed = alice.get(ROLLOUTS).json()
    assert listed["count"] == 1 and listed["results"][0]["id"] == rollout["id"]
    one = f"{ROLLOUTS}{rollout['id']}/"
    assert alice.get(one).json()["steps"] == [20, 100]
    again = alice.json("post", ROLLOUTS, {"canary_version": 2})
    assert again.status_code == 409 and "running already" in again.json()["error"]
    for change, state in (("pause", "paused"), ("resume", "running"), ("abort", "aborted")):
        answer = alice.json("post", f"{one}{change}")
        assert answer.status_code == 200 and answer.json()["state"] == state, answer.json()
    assert alice.json("post", f"{one}resume").status_code == 409
    assert selectors.model_get("m").traffic == {"canary": 0, "stable": 100}
    assert alice.get(f"{ROLLOUTS}999/").status_code == 404


@pytest.mark.parametrize(
    "body, status, words",
    [
        ({}, 400, "canary_version"),
        ({"canary_version": "2"}, 400, "canary_version"),
        ({"canary_version": 2, "steps": [0, 100]}, 400, "steps"),
        ({"canary_version": 2, "steps": []}, 400, "steps"),
        ({"canary_version": 2, "pause_seconds": -1}, 400, "pause_seconds"),
        ({"canary_version": 2, "max_error_rate": 2}, 400, "max_error_rate"),
        ({"canary_version": 2, "steps": [50, 40, 100]}, 409, "increase and end at 100"),
        ({"canary_version": 9}, 409, "has no version 9"),
        ({"canary_version": 1}, 409, "is the stable version"),
    ],
)
def test_bad_starts_are_4xx_with_an_error(alice, body, status, words):
    answer = alice.json("post", ROLLOUTS, body)
    assert answer.status_code == status and words in str(answer.json()["error"]) + str(answer.json()), answer.json()
    assert alice.get(ROLLOUTS).json()["count"] == 0


def test_another_team_and_no_credential(alice):
    bob = Api(accounts.token_create(user=person("bob", "vision"), name="script")[1])
    assert bob.json("post", ROLLOUTS, {"canary_version": 2}).status_code == 403
    assert Client().post(ROLLOUTS, {"canary_version": 2}, content_type="application/json").status_code == 401
    rollout = alice.json("post", ROLLOUTS, {"canary_version": 2}).json()
    assert bob.json("post", f"{ROLLOUTS}{rollout['id']}/abort").status_code == 403
    assert Client().post(f"{ROLLOUTS}{rollout['id']}/abort").status_code == 401
