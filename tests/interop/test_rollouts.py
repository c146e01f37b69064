"""Traffic split between version labels against a live server (in process,
or through a worker with MODELHOST_TEST_EXECUTOR=workers): a 90/10 split
over 2,000 unversioned requests lands within 3 points of 10%, every answer
names the version that ran it (V2 ``model_version``, gRPC, TF Serving
``model_spec.version``), requests naming a version or a label are never
split, statistics and Prometheus metrics count per version, and promote and
rollback are audited with their actor."""

from __future__ import annotations

import http.client
import json
import re

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from tests.support import onnx_models as m
from tests.support.live import bearer, multipart, people_with_tokens, request, wait_for

pytestmark = pytest.mark.interop

MODEL = "canaried"
SCALES = {1: 1.0, 2: 3.0}  # version -> y = scale * x: the answer itself tells which version ran


@pytest.fixture(scope="module")
def alice(model_server):
    """A member of team "rollouts" with an API token."""
    return people_with_tokens(model_server, rollout_alice="rollouts")["rollout_alice"]


@pytest.fixture(scope="module")
def canaried(model_server, alice):
    """Model "canaried" (team rollouts): version 1 (stable, y = x), version 2 (canary, y = 3x)."""
    for number, scale in SCALES.items():
        body, kind = multipart({"team": "rollouts"}, m.affine(scale, 0.0))
        status, answer = request(
            model_server, "POST", f"/api/models/{MODEL}/versions/", body, {**bearer(alice), "Content-Type": kind}
        )
        assert status in (201, 202) and answer["number"] == number, answer

    def both_ready() -> bool:  # worker mode validates them in parallel: version 2 may be READY first
        return [v["state"] for v in _get_model(model_server, alice)["versions"]] == ["READY", "READY"]

    assert wait_for(both_ready, timeout=60) and _get_model(model_server, alice)["served_versions"] == [2]
    return MODEL


@pytest.fixture(autouse=True)
def fresh(model_server, alice, canaried):
    """Each test starts from: no split, stable -> 1, canary -> 2."""
    status, answer = _json(model_server, alice, "PUT", f"/api/models/{MODEL}/traffic/", {"weights": {}})
    assert status == 200, answer
    for label, number in (("stable", 1), ("canary", 2)):
        status, answer = _json(model_server, alice, "PUT", f"/api/models/{MODEL}/labels/{label}/", {"version": number})
        assert status == 200, answer


def _json(server, token, method: str, path: str, body=None):
    data = json.dumps(body).encode() if body is not None else b""
    headers = {**bearer(token), **({"Content-Type": "application/json"} if body is not None else {})}
    return request(server, method, path, data, headers)


def _get_model(server, token) -> dict:
    status, answer = request(server, "GET", f"/api/models/{MODEL}/", headers=bearer(token))
    assert status == 200, answer
    return answer


class KeepAlive:
    """One keep-alive HTTP connection for many small requests."""

    def __init__(self, server):
        host, port = server.http_url.split(":")
        self.conn = http.client.HTTPConnection(host, int(port), timeout=60)

    def post(self, path: str, doc: dict) -> tuple[int, dict]:
        self.conn.request("POST", path, body=json.dumps(doc).encode(), headers={"Content-Type": "application/json"})
        response = self.conn.getresponse()
        return response.status, json.loads(response.read())

    def close(self) -> None:
        self.conn.close()


def _v2(x: np.ndarray) -> dict:
    return {"inputs": [{"name": "x", "shape": list(x.shape), "datatype": "FP32", "data": x.ravel().tolist()}]}


def _version_of(x: np.ndarray, y) -> int:
    """Which version computed ``y`` from ``x`` (its scale)."""
    matches = [n for n, scale in SCALES.items() if np.allclose(np.asarray(y, dtype=np.float32).ravel(), scale * x)]
    assert len(matches) == 1, (x, y)
    return matches[0]


def _stats(server) -> dict[int, int]:
    status, body = request(server, "GET", f"/v2/models/{MODEL}/stats")
    assert status == 200, body
    return {int(s["version"]): s["inference_stats"]["success"]["count"] for s in body["model_stats"]}


def _metric(server, version: int, protocol: str = "rest") -> float:
    _status, body = request(server, "GET", "/metrics")
    text = body.decode() if isinstance(body, bytes) else body
    pattern = r"modelhost_inference_requests_total\{([^}]*)\} ([0-9.e+]+)"
    total = 0.0
    for labels, value in re.findall(pattern, text):
        if (
            f'model="{MODEL}"' in labels
            and f'version="{version}"' in labels
            and f'protocol="{protocol}"' in labels
            and 'outcome="success"' in labels
        ):
            total += float(value)
    return total


def test_a_90_10_split_lands_within_3_points_and_every_answer_names_its_version(model_server, alice, canaried):
    status, answer = _json(
        model_server, alice, "PUT", f"/api/models/{MODEL}/traffic/", {"weights": {"stable": 90, "canary": 10}}
    )
    assert status == 200 and answer["traffic"] == {"canary": 10, "stable": 90}, answer
    assert answer["served_versions"] == [2, 1]  # the split keeps both serving (the policy is latest 1)
    stats_before = _stats(model_server)
    metrics_before = {n: _metric(model_server, n) for n in SCALES}

    client = KeepAlive(model_server)
    rng = np.random.default_rng(17)
    counts = {1: 0, 2: 0}
    try:
        for _ in range(2000):
            x = rng.uniform(-5, 5, size=(1, 4)).astype(np.float32)
            status, body = client.post(f"/v2/models/{MODEL}/infer", _v2(x))
            assert status == 200, body
            named = int(body["model_version"])
            assert named == _version_of(x, body["outputs"][0]["data"])  # the answer names the version that ran
            counts[named] += 1
    finally:
        client.close()
    share = counts[2] / 2000
    print(f"90/10 split over 2,000 requests: canary {counts[2]} ({share:.2%}), stable {counts[1]}")
    assert abs(share - 0.10) <= 0.03, counts

    # Statistics and Prometheus metrics per version show the same split.
    def stats_settled():
        after = _stats(model_server)
        return all(after.get(n, 0) - stats_before.get(n, 0) == counts[n] for n in SCALES)

    assert wait_for(stats_settled, timeout=20), (_stats(model_server), stats_before, counts)
    for number in SCALES:
        assert _metric(model_server, number) - metrics_before[number] == counts[number]


def test_requests_naming_a_version_or_label_are_never_split(model_server, alice, canaried):
    status, _ = _json(
        model_server, alice, "PUT", f"/api/models/{MODEL}/traffic/", {"weights": {"stable": 50, "canary": 50}}
    )
    assert status == 200
    client = KeepAlive(model_server)
    x = np.arange(4, dtype=np.float32).reshape(1, 4)
    try:
        for _ in range(40):
            status, body = client.post(f"/v2/models/{MODEL}/versions/1/infer", _v2(x))
            assert status == 200 and body["model_version"] == "1"
            assert _version_of(x, body["outputs"][0]["data"]) == 1
            status, body = client.post(f"/v1/models/{MODEL}/labels/canary:predict", {"instances": x.tolist()})
            assert status == 200 and _version_of(x, body["predictions"]) == 2
            assert "model_spec" not in body  # TF Serving's own answer: no split, nothing added
            status, body = client.post(f"/v1/models/{MODEL}/versions/1:predict", {"instances": x.tolist()})
            assert status == 200 and _version_of(x, body["predictions"]) == 1
        # Unversioned TF Serving requests are split and name their version (model_spec.version).
        seen = set()
        for _ in range(60):
            status, body = client.post(f"/v1/models/{MODEL}:predict", {"instances": x.tolist()})
            assert status == 200, body
            version = int(body["model_spec"]["version"])
            assert body["model_spec"]["name"] == MODEL and version == _version_of(x, body["predictions"])
            seen.add(version)
        assert seen == {1, 2}
    finally:
        client.close()
    # gRPC: the response's model_version names the version; unversioned requests are split too.
    grpc = grpcclient.InferenceServerClient(model_server.grpc_url)
    try:
        seen = set()
        for _ in range(60):
            inp = grpcclient.InferInput("x", [1, 4], "FP32")
            inp.set_data_from_numpy(x)
            result = grpc.infer(MODEL, [inp])
            version = int(result.get_response().model_version)
            assert version == _version_of(x, result.as_numpy("y"))
            seen.add(version)
        assert seen == {1, 2}
        inp = grpcclient.InferInput("x", [1, 4], "FP32")
        inp.set_data_from_numpy(x)
        assert all(grpc.infer(MODEL, [inp], model_version="2").get_response().model_version == "2" for _ in range(20))
    finally:
        grpc.close()


def test_each_request_of_a_stream_is_split_on_its_own(model_server, alice, canaried):
    """A 50/50 split over one gRPC stream of 200 unversioned requests: each
    request is drawn on its own (both versions answer, about half each),
    every answer names the version that computed it; requests of the stream
    naming a version are not split."""
    import queue

    status, _ = _json(
        model_server, alice, "PUT", f"/api/models/{MODEL}/traffic/", {"weights": {"stable": 50, "canary": 50}}
    )
    assert status == 200
    rng = np.random.default_rng(5)
    xs = [rng.uniform(-5, 5, size=(1, 4)).astype(np.float32) for _ in range(220)]
    answers: queue.Queue = queue.Queue()
    client = grpcclient.InferenceServerClient(model_server.grpc_url)
    client.start_stream(callback=lambda result, error: answers.put((result, error)))
    try:
        for i, x in enumerate(xs):
            inp = grpcclient.InferInput("x", [1, 4], "FP32")
            inp.set_data_from_numpy(x)
            client.async_stream_infer(MODEL, [inp], model_version="1" if i >= 200 else "", request_id=str(i))
        results = [answers.get(timeout=30) for _ in xs]
    finally:
        client.stop_stream()
        client.close()
    counts = {1: 0, 2: 0}
    for i, (result, error) in enumerate(results):
        assert error is None, error
        response = result.get_response()
        version = int(response.model_version)
        assert response.id == str(i) and version == _version_of(xs[i], result.as_numpy("y"))
        if i >= 200:
            assert version == 1
        else:
            counts[version] += 1
    assert 70 <= counts[2] <= 130, counts  # 50% of 200, within 4 standard deviations


def _all_go_to(server, version: int, count: int = 60) -> bool:
    client = KeepAlive(server)
    x = np.ones((1, 4), dtype=np.float32)
    try:
        for _ in range(count):
            status, body = client.post(f"/v2/models/{MODEL}/infer", _v2(x))
            if status != 200 or body["model_version"] != str(version):
                return False
        return True
    finally:
        client.close()


def test_rollback_and_promote_are_audited(model_server, alice, canaried):
    status, answer = _json(
        model_server, alice, "PUT", f"/api/models/{MODEL}/traffic/", {"weights": {"stable": 80, "canary": 20}}
    )
    assert status == 200
    status, answer = _json(model_server, alice, "POST", f"/api/models/{MODEL}/traffic/rollback")
    assert status == 200 and answer["traffic"] == {"canary": 0, "stable": 100}, answer
    assert _all_go_to(model_server, 1)  # read-your-writes: every process follows before the call answered

    status, answer = _json(model_server, alice, "POST", f"/api/models/{MODEL}/traffic/promote")
    assert status == 200, answer
    assert answer["labels"] == {"canary": 2, "stable": 2} and answer["traffic"] == {"canary": 0, "stable": 100}
    assert _all_go_to(model_server, 2)

    status, events = request(model_server, "GET", f"/api/models/{MODEL}/audit/", headers=bearer(alice))
    assert status == 200
    recent = [(e["action"], e["actor_name"], e["version_number"]) for e in events["results"][:3]]
    assert recent == [
        ("traffic.promote", "rollout_alice", 2),
        ("traffic.rollback", "rollout_alice", 1),
        ("traffic.set", "rollout_alice", None),
    ]
    assert events["results"][0]["detail"]["stable_before"] == 1 and events["results"][0]["detail"]["stable"] == 2
    assert events["results"][2]["detail"]["traffic"] == {"canary": 20, "stable": 80}


def test_traffic_changes_need_a_token_of_the_models_team(model_server, alice, canaried):
    for headers, expected in (({}, 401), (bearer("mh_not-a-token"), 401)):
        status, answer = request(
            model_server, "PUT", f"/api/models/{MODEL}/traffic/", b'{"weights": {}}',
            {**headers, "Content-Type": "application/json"},
        )  # fmt: skip
        assert status == expected and "error" in answer
    outsider = people_with_tokens(model_server, rollout_bob="outsiders")["rollout_bob"]
    for method, path, body in (
        ("PUT", "traffic/", {"weights": {}}),
        ("POST", "traffic/promote", None),
        ("POST", "traffic/rollback", None),
    ):
        status, answer = _json(model_server, outsider, method, f"/api/models/{MODEL}/{path}", body)
        assert status == 403 and "error" in answer


@pytest.mark.parametrize(
    "weights, status, words",
    [
        ({"stable": 90, "canary": 20}, 409, "add up to 100"),
        ({"stable": 90, "nightly": 10}, 409, "no version label 'nightly'"),
        ({"stable": 101}, 400, "weights"),
        ({"stable": -1, "canary": 101}, 400, "weights"),
        ({"stable": "90"}, 400, "weights"),
    ],
)
def test_bad_splits_are_refused_and_change_nothing(model_server, alice, canaried, weights, status, words):
    before = _get_model(model_server, alice)["traffic"]
    code, answer = _json(model_server, alice, "PUT", f"/api/models/{MODEL}/traffic/", {"weights": weights})
    assert code == status and words in answer["error"], answer
    assert _get_model(model_server, alice)["traffic"] == before


def test_a_label_in_the_split_cannot_be_deleted(model_server, alice, canaried):
    status, _ = _json(
        model_server, alice, "PUT", f"/api/models/{MODEL}/traffic/", {"weights": {"stable": 70, "canary": 30}}
    )
    assert status == 200
    status, answer = _json(model_server, alice, "DELETE", f"/api/models/{MODEL}/labels/canary/")
    assert status == 409 and "change the split first" in answer["error"]
    status, _ = _json(model_server, alice, "PUT", f"/api/models/{MODEL}/traffic/", {"weights": {}})
    assert status == 200


def _upload_ready(server, token, model: str, scale: float) -> int:
    """Upload y = scale * x as the next version of ``model`` (team rollouts); its number, once READY."""
    body, kind = multipart({"team": "rollouts"}, m.affine(scale, 0.0))
    status, answer = request(
        server, "POST", f"/api/models/{model}/versions/", body, {**bearer(token), "Content-Type": kind}
    )
    assert status in (201, 202), answer
    number = answer["number"]
    path = f"/api/models/{model}/versions/{number}/"
    assert wait_for(lambda: request(server, "GET", path, headers=bearer(token))[1]["state"] == "READY", timeout=60)
    return number


def _unversioned_answers(server, model: str, count: int = 30) -> list[tuple[int, int]]:
    """(named version, version that computed it) of ``count`` unversioned V2 requests."""
    client = KeepAlive(server)
    x = np.arange(1, 5, dtype=np.float32).reshape(1, 4)
    answers = []
    try:
        for _ in range(count):
            status, body = client.post(f"/v2/models/{model}/infer", _v2(x))
            assert status == 200, body
            scale = float(np.asarray(body["outputs"][0]["data"], dtype=np.float32)[0] / x[0, 0])
            answers.append((int(body["model_version"]), scale))
    finally:
        client.close()
    return answers


def test_a_split_never_dangles_after_a_version_or_label_delete(model_server, alice):
    """F13, the attack as found: delete the version a split's label serves
    (204 before; the split kept the label), re-create the label on another
    version: it silently took its share of the traffic. Now the delete is
    409 naming the split while the label carries traffic; with weight 0 the
    label leaves the split (audited traffic.set), and the re-created label
    gets no request."""
    model = "unsplit"
    scales = {_upload_ready(model_server, alice, model, s): s for s in (1.0, 3.0)}
    assert sorted(scales) == [1, 2]
    for label, number in (("stable", 1), ("canary", 2)):
        status, answer = _json(model_server, alice, "PUT", f"/api/models/{model}/labels/{label}/", {"version": number})
        assert status == 200, answer
    weights = {"weights": {"stable": 70, "canary": 30}}
    assert _json(model_server, alice, "PUT", f"/api/models/{model}/traffic/", weights)[0] == 200

    status, answer = _json(model_server, alice, "DELETE", f"/api/models/{model}/versions/2/")
    assert status == 409 and answer == {
        "error": f"the traffic split of '{model}' sends 30% of its requests to label 'canary', which points at "
        "version 2; change the split first"
    }
    status, answer = _json(model_server, alice, "DELETE", f"/api/models/{model}/labels/canary/")
    assert status == 409 and f"the traffic split of '{model}' sends 30%" in answer["error"]
    status, after = request(model_server, "GET", f"/api/models/{model}/", headers=bearer(alice))
    assert [v["number"] for v in after["versions"]] == [2, 1] and after["traffic"] == {"canary": 30, "stable": 70}
    assert {version for version, _ in _unversioned_answers(model_server, model, 60)} == {1, 2}  # still split

    # Rolled back, the canary has weight 0: its version may go, and the label leaves the split.
    assert _json(model_server, alice, "POST", f"/api/models/{model}/traffic/rollback")[0] == 200
    status, _ = _json(model_server, alice, "DELETE", f"/api/models/{model}/versions/2/")
    assert status == 204
    status, after = request(model_server, "GET", f"/api/models/{model}/", headers=bearer(alice))
    assert after["traffic"] == {"stable": 100} and after["labels"] == {"stable": 1}
    status, events = request(model_server, "GET", f"/api/models/{model}/audit/", headers=bearer(alice))
    assert [(e["action"], e["actor_name"]) for e in events["results"][:3]] == [
        ("version.delete", "rollout_alice"),
        ("traffic.set", "rollout_alice"),
        ("traffic.rollback", "rollout_alice"),
    ]
    assert events["results"][1]["detail"]["before"] == {"canary": 0, "stable": 100}
    assert events["results"][1]["detail"]["traffic"] == {"stable": 100} and events["results"][1]["detail"][
        "dropped"
    ] == ["canary"]

    # The label re-created on a new version (y = 5x) gets no request: every one goes to stable (y = x).
    number = _upload_ready(model_server, alice, model, 5.0)
    status, answer = _json(model_server, alice, "PUT", f"/api/models/{model}/labels/canary/", {"version": number})
    assert status == 200 and answer["traffic"] == {"stable": 100}, answer
    assert _unversioned_answers(model_server, model) == [(1, 1.0)] * 30
