"""Service accounts and people leaving, on a live server with inference
tokens required (V2 REST inference, the management API): a service
account's token keeps calling after the person who made it is deactivated;
that person's personal token is refused; a person deactivated behind the
services' back (an SQL UPDATE: no change stamp) is refused within
INFERENCE_TOKEN_CACHE_SECONDS; a viewer's token calls but does not change."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest

from tests.support import onnx_models as m
from tests.support.live import bearer, infer_json, manage, request
from tests.support.server import serve_live

CACHE_SECONDS = 1.0


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    repository = tmp_path_factory.mktemp("sa-repository")
    m.write_model(repository, "scaler", m.affine(2.0, 0.0))
    env = {
        "INFERENCE_REQUIRE_TOKEN": "true",
        "INFERENCE_TOKEN_CACHE_SECONDS": str(CACHE_SECONDS),
        "REPOSITORY_TEAM": "ml",
    }
    yield from serve_live(repository, tmp_path_factory.mktemp("sa-live"), env)


def _shell(server, code: str) -> str:
    return manage(server, "shell", "-c", code).strip().splitlines()[-1]


def _call(server, token: str) -> int:
    status, answer = infer_json(server, token, "scaler", np.ones((1, 4), np.float32))
    if status == 200:
        assert answer["outputs"][0]["data"] == [2.0] * 4
    return status


def test_a_service_account_outlives_its_creator_and_a_leaver_is_refused(server):
    password = {"MODELHOST_PASSWORD": "Correct-horse-battery-9"}
    manage(server, "create_user", "dev", "--team", "ml", "--password-from-env", env=password)
    manage(server, "create_user", "eve", "--team", "ml", "--role", "viewer", "--password-from-env", env=password)
    personal = manage(server, "create_token", "dev", "laptop").strip()
    eve = manage(server, "create_token", "eve", "notebook").strip()
    created = request(server, "POST", "/api/teams/ml/service-accounts/", json.dumps({"name": "recommender"}).encode(),
                      {**bearer(personal), "Content-Type": "application/json"})  # fmt: skip
    assert created[0] == 201, created
    body = json.dumps({"name": "prod", "role": "viewer", "expires_in_days": 30}).encode()
    status, token = request(server, "POST", f"/api/teams/ml/service-accounts/{created[1]['id']}/tokens/", body,
                            {**bearer(personal), "Content-Type": "application/json"})  # fmt: skip
    assert status == 201
    app = token["token"]
    assert [_call(server, t) for t in (personal, eve, app)] == [200, 200, 200]
    label = json.dumps({"version": 1}).encode()
    for viewer in (eve, app):  # viewers call, but do not change
        headers = {**bearer(viewer), "Content-Type": "application/json"}
        assert request(server, "PUT", "/api/models/scaler/labels/stable/", label, headers)[0] == 403

    # dev leaves the company (the service: the change stamp moves)
    _shell(server, "from django.contrib.auth.models import User; from models_store.accounts import services; "
                   "services.user_deactivate(user=User.objects.get(username='dev')); print('ok')")  # fmt: skip
    assert request(server, "GET", "/api/models/", b"", bearer(personal))[0] == 401
    deadline = time.monotonic() + 5
    while _call(server, personal) != 401:
        assert time.monotonic() < deadline, "the leaver's token still calls"
        time.sleep(0.05)
    assert _call(server, app) == 200  # the service account's token keeps working
    assert request(server, "GET", "/api/models/scaler/", b"", bearer(app))[0] == 200

    # eve is deactivated behind the services' back: only INFERENCE_TOKEN_CACHE_SECONDS bounds it
    _shell(server, "from django.contrib.auth.models import User; "
                   "print(User.objects.filter(username='eve').update(is_active=False))")  # fmt: skip
    done = time.monotonic()
    while _call(server, eve) != 401:
        assert time.monotonic() - done < CACHE_SECONDS + 1.0, "still accepted past INFERENCE_TOKEN_CACHE_SECONDS"
        time.sleep(0.05)
    assert _call(server, app) == 200
