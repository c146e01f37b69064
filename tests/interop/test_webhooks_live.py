"""Webhooks of a live ``serve`` (the embedded default: attempts on a
background thread of the server): a subscription made over the management
API, an upload's ``version.ready`` sent to a real receiver on 127.0.0.1
that answers 500 three times then 200: it gets the event exactly once more,
with the same ``webhook-id``, each time signed so that the
``standardwebhooks`` library verifies it; the deliveries API shows the four
attempts; an address WEBHOOK_ALLOWED_HOSTS does not list is refused (400)."""

from __future__ import annotations

import json
import time

import pytest
from standardwebhooks import Webhook

from tests.support import onnx_models as m
from tests.support.live import bearer, multipart, people_with_tokens, request, wait_for
from tests.support.server import LiveServer
from tests.support.webhook_receiver import Receiver

pytestmark = pytest.mark.interop


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    repository = tmp_path_factory.mktemp("webhook-repository")
    live = LiveServer(
        repository,
        tmp_path_factory.mktemp("webhook-live"),
        extra_env={
            "WEBHOOK_ALLOWED_HOSTS": "127.0.0.1",
            "WEBHOOK_RETRY_SECONDS": "0.2",
            "WEBHOOK_RETRY_MAX_SECONDS": "0.5",
        },
    )
    live.start()
    yield live
    assert live.stop() == 0, live.log()


def _json(server, method: str, path: str, token: str, body=None):
    data = json.dumps(body).encode() if body is not None else b""
    return request(server, method, path, data, {**bearer(token), "Content-Type": "application/json"})


def test_500_three_times_then_200_over_a_live_server(server):
    token = people_with_tokens(server, alice="ml")["alice"]
    with Receiver([500, 500, 500]) as hooks:
        status, created = _json(
            server, "POST", "/api/teams/ml/webhooks/", token, {"url": hooks.url, "events": ["version.ready"]}
        )
        assert status == 201, created
        body, kind = multipart({"team": "ml"}, m.affine(2.0, 1.0))
        status, version = request(
            server, "POST", "/api/models/hooked/versions/", body, {**bearer(token), "Content-Type": kind}
        )
        assert status == 201 and version["state"] == "READY", version
        received = hooks.wait_for(4, timeout=30)
        time.sleep(1.5)  # well past the next back-off: nothing more comes
        assert len(hooks.received) == 4
    assert len({r.headers["webhook-id"] for r in received}) == 1
    for r in received:
        payload = Webhook(created["secret"]).verify(r.body, r.headers)
        assert payload["type"] == "version.ready" and payload["data"]["model"] == "hooked"
        assert payload["data"]["version"] == version["number"] and payload["data"]["sha256"] == version["sha256"]
        assert payload["data"]["inputs"] == version["inputs"]
    path = f"/api/teams/ml/webhooks/{created['id']}/deliveries/"
    assert wait_for(lambda: _json(server, "GET", path, token)[1]["results"][0]["state"] == "SUCCEEDED")
    (delivery,) = _json(server, "GET", path, token)[1]["results"]
    assert delivery["message_id"] == received[0].headers["webhook-id"]
    assert [a["status_code"] for a in delivery["attempts"]] == [500, 500, 500, 200]


def test_an_address_not_on_the_allow_list_is_refused(server):
    token = people_with_tokens(server, bob="ml2")["bob"]
    for url in ("http://127.0.0.2:8080/", "http://[::1]:8080/", "http://10.9.8.7/", "http://169.254.169.254/"):
        status, answer = _json(
            server, "POST", "/api/teams/ml2/webhooks/", token, {"url": url, "events": ["label.moved"]}
        )
        assert status == 400 and "address" in answer["error"], answer
    assert _json(server, "GET", "/api/teams/ml2/webhooks/", token)[1]["count"] == 0
