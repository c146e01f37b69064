"""A breaking upload never goes live by itself (live server, in process or
through a worker with MODELHOST_TEST_EXECUTOR=workers): model "silent" v1
takes input ``x [-1, 4]``; a client calls it about every 20 ms with
``tritonclient`` (no version named) while v2, with input ``features [-1, 5]``,
is uploaded under the default version policy (latest 1). v2 is validated,
READY and held: the client gets 0 errors and every answer from v1 (checked
against numpy), the API and the version page say why, and a forced promote
then switches the default route to v2."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.support import onnx_models as m
from tests.support.live import bearer, manage, request, upload, wait_for, web_session

pytestmark = pytest.mark.interop

MODEL = "silent"
PASSWORD = "held-Secret-1357"
SCALE = 2.0  # v1: y = 2x + 1
V1 = m.affine(SCALE, 1.0)
V2 = m.passthrough([("features", "FP32", ("N", 5))], [("y", "FP32")])

_USER_SCRIPT = f"""
from models_store.accounts import services as accounts
user = accounts.user_create(username="held_alice", password="{PASSWORD}", teams=["held"])
print(accounts.token_create(user=user, name="script")[1])
"""


@pytest.fixture(scope="module")
def alice(model_server):
    return manage(model_server, "shell", "-c", _USER_SCRIPT).strip().splitlines()[-1]


class Caller(threading.Thread):
    """Calls MODEL with input ``x`` (no version named) until stopped; keeps every outcome."""

    def __init__(self, server, token: str):
        super().__init__(daemon=True)
        self.client = httpclient.InferenceServerClient(server.http_url)
        self.headers = bearer(token)
        self.stop = threading.Event()
        self.answers: list[tuple[str, np.ndarray, np.ndarray]] = []  # (version, x, y)
        self.errors: list[str] = []
        self.rng = np.random.default_rng(7)

    def run(self) -> None:
        while not self.stop.is_set():
            x = self.rng.normal(size=(2, 4)).astype(np.float32)
            inp = httpclient.InferInput("x", [2, 4], "FP32")
            inp.set_data_from_numpy(x)
            try:
                result = self.client.infer(MODEL, [inp], headers=self.headers)
                self.answers.append((result.get_response()["model_version"], x, result.as_numpy("y")))
            except InferenceServerException as exc:
                self.errors.append(str(exc))
            time.sleep(0.02)


def test_a_breaking_upload_is_held_while_callers_keep_working(model_server, alice):
    status, answer = upload(model_server, alice, MODEL, V1, team="held")
    assert status in (201, 202), answer
    assert wait_for(lambda: _version(model_server, alice, 1)["serving"], timeout=60)

    caller = Caller(model_server, alice)
    caller.start()
    try:
        assert wait_for(lambda: len(caller.answers) >= 20, timeout=30)
        status, answer = upload(model_server, alice, MODEL, V2)
        assert status in (201, 202) and answer["number"] == 2, answer
        assert wait_for(lambda: _version(model_server, alice, 2)["state"] == "READY", timeout=60)
        seen = len(caller.answers)
        assert wait_for(lambda: len(caller.answers) >= seen + 50, timeout=30)  # about 1 s more of calls
    finally:
        caller.stop.set()
        caller.join(timeout=30)

    assert caller.errors == []
    assert len(caller.answers) >= 70
    for version, x, y in caller.answers:
        assert version == "1"
        np.testing.assert_allclose(y, SCALE * x + 1.0, rtol=1e-6)

    held = _version(model_server, alice, 2)
    assert (held["state"], held["held"], held["serving"]) == ("READY", True, False)
    assert "input 'x' removed" in held["reason"] and "input 'features' added and required" in held["reason"]
    model = _model(model_server, alice)
    assert (model["default_version"], model["served_versions"]) == (1, [1])

    cookie = web_session(model_server, "held_alice", PASSWORD)
    status, page = request(model_server, "GET", f"/models/{MODEL}/versions/2/", headers={"Cookie": cookie})
    page = page.decode()
    assert status == 200 and 'id="held-badge"' in page and "So it is held" in page
    assert "input &#x27;x&#x27; removed (version 1 -&gt; 2)" in page

    status, refused = request(model_server, "POST", f"/api/models/{MODEL}/versions/2/promote", headers=bearer(alice))
    assert status == 409 and "input 'x' removed (version 1 -> 2)" in refused["differences"][0]
    status, promoted = request(
        model_server, "POST", f"/api/models/{MODEL}/versions/2/promote?force=true", headers=bearer(alice)
    )
    assert status == 200 and promoted["held"] is False, promoted
    assert wait_for(lambda: _model(model_server, alice)["default_version"] == 2, timeout=30)

    features = np.arange(10, dtype=np.float32).reshape(2, 5)
    inp = httpclient.InferInput("features", [2, 5], "FP32")
    inp.set_data_from_numpy(features)
    with httpclient.InferenceServerClient(model_server.http_url) as client:
        result = client.infer(MODEL, [inp], headers=bearer(alice))
    assert result.get_response()["model_version"] == "2"
    np.testing.assert_array_equal(result.as_numpy("y"), features)


def _version(server, token: str, number: int) -> dict:
    status, answer = request(server, "GET", f"/api/models/{MODEL}/versions/{number}/", headers=bearer(token))
    assert status == 200, answer
    return answer


def _model(server, token: str) -> dict:
    status, answer = request(server, "GET", f"/api/models/{MODEL}/", headers=bearer(token))
    assert status == 200, answer
    return answer
