"""The model store under load and abuse, against a live ``serve``: parallel
first uploads of one model, uploads whose validation would take all memory,
models whose declared output shapes lie, and API tokens that expire."""

from __future__ import annotations

import hashlib
import json
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from tests.support import onnx_models as m
from tests.support.live import bearer, infer_json, manage, people_with_tokens, request, token_server, upload

pytestmark = pytest.mark.interop


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    yield from token_server(tmp_path_factory, poll_seconds=0.2)


@pytest.fixture(scope="module")
def tokens(server):
    """alice and carol (team ml), bob (team vision)."""
    return people_with_tokens(server, alice="ml", carol="ml", bob="vision")


def _upload(server, token: str, model: str, payload: bytes, team: str | None = "ml"):
    return upload(server, token, model, payload, team)


_infer = infer_json


# -- parallel first uploads -------------------------------------------------------
def test_parallel_first_uploads_become_versions_of_one_model(server, tokens):
    """Ten clients upload the first versions of a new model at once (two
    members of its team): every upload becomes a version of the one model."""
    payloads = [m.affine(float(i + 1), 0.0) for i in range(10)]
    users = ["alice", "carol"] * 5
    with ThreadPoolExecutor(10) as pool:
        answers = list(pool.map(lambda i: _upload(server, tokens[users[i]], "race", payloads[i]), range(10)))
    assert [status for status, _ in answers] == [201] * 10, answers
    numbers = sorted(answer["number"] for _, answer in answers)
    assert numbers == list(range(1, 11))
    status, model = request(server, "GET", "/api/models/race/", headers=bearer(tokens["alice"]))
    assert status == 200 and model["team"] == "ml" and len(model["versions"]) == 10
    scale_of = {hashlib.sha256(p).hexdigest(): i + 1 for i, p in enumerate(payloads)}
    assert sorted(scale_of[answer["sha256"]] for _, answer in answers) == list(range(1, 11))
    status, _ = request(
        server,
        "PATCH",
        "/api/models/race/",
        json.dumps({"version_policy": "all"}).encode(),
        {**bearer(tokens["alice"]), "Content-Type": "application/json"},
    )
    assert status == 200
    x = np.array([[1.0, 2.0, 3.0, 4.0]], dtype=np.float32)
    for _, answer in answers:  # each version computes its own scale
        status, result = _infer(server, tokens["alice"], f"race/versions/{answer['number']}", x)
        assert status == 200, result
        np.testing.assert_allclose(result["outputs"][0]["data"], (scale_of[answer["sha256"]] * x).ravel())


@pytest.mark.parametrize("attempt", range(3))
def test_a_model_raced_by_two_teams_belongs_to_one(server, tokens, attempt):
    """alice (ml) and bob (vision) create "contested" at once: one team owns
    it, and the other's upload did not become one of its versions."""
    with ThreadPoolExecutor(2) as pool:
        ml = pool.submit(_upload, server, tokens["alice"], f"contested{attempt}", m.affine(1.0, 1.0), "ml")
        vision = pool.submit(_upload, server, tokens["bob"], f"contested{attempt}", m.affine(2.0, 2.0), "vision")
        answers = {"ml": ml.result(), "vision": vision.result()}
    winners = [team for team, (status, _) in answers.items() if status == 201]
    assert len(winners) == 1, answers
    winner = winners[0]
    loser = "vision" if winner == "ml" else "ml"
    owner = {"ml": tokens["alice"], "vision": tokens["bob"]}
    status, model = request(server, "GET", f"/api/models/contested{attempt}/", headers=bearer(owner[winner]))
    assert status == 200 and len(model["versions"]) == 1 and model["team"] == winner, (model, answers)
    # Tokens are required here: the other team does not see the model at all, and was told the name is taken.
    assert request(server, "GET", f"/api/models/contested{attempt}/", headers=bearer(owner[loser]))[0] == 404
    assert answers[loser][0] in (400, 403, 409) and answers[loser][1]["error"], answers


# -- validation that would take all memory ------------------------------------------
def _http_workers(server) -> list[int]:
    """pids of the granian worker processes of the server."""
    pids = []
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            text = status.read_text()
            cmdline = (status.parent / "cmdline").read_bytes()
        except OSError:
            continue
        ppid = int(next(line.split()[1] for line in text.splitlines() if line.startswith("PPid:")))
        if b"granian" in cmdline and str(server.http_port).encode() in cmdline and ppid != server.process.pid:
            pids.append(int(status.parent.name))
    return pids


def _peak_rss(pids: list[int]) -> int:
    """Sum of the processes' peak resident sizes (VmHWM), bytes."""
    total = 0
    for pid in pids:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                total += int(line.split()[1]) * 1024
    return total


def test_a_tiny_model_whose_input_no_request_can_carry_fails_without_running(server, tokens):
    """An Identity of a fixed [5000, 5000] FP32 input (100 MB, above
    MAX_REQUEST_BYTES): validation refuses it from the graph, without a
    warm-up that would allocate the tensors."""
    payload = m.declared_shapes([5000, 5000], [5000, 5000])
    assert len(payload) < 200
    workers = _http_workers(server)
    assert workers
    before = _peak_rss(workers)
    status, answer = _upload(server, tokens["alice"], "huge_input", payload)
    assert status == 422, answer
    assert "input 'x'" in answer["error"] and "100000000 bytes" in answer["error"], answer
    assert "MAX_REQUEST_BYTES" in answer["error"]
    assert _peak_rss(workers) - before < 50 * 1024 * 1024


def test_a_warm_up_above_the_cap_is_skipped_with_the_reason(server, tokens):
    """A one-element input broadcast to a [5000, 5000] output: the warm-up
    would allocate 100 MB (above the cap, MAX_REQUEST_BYTES by default), so
    validation checks the graph and skips it, saying why."""
    workers = _http_workers(server)
    before = _peak_rss(workers)
    status, answer = _upload(server, tokens["alice"], "huge_output", m.expand_to([5000, 5000]))
    assert status == 201, answer
    assert answer["state"] == "READY"
    skipped = [line for line in answer["log"] if "warm-up skipped" in line]
    assert skipped and "100000000 bytes" in skipped[0] and "VALIDATION_WARMUP_MAX_BYTES" in skipped[0], answer["log"]
    assert _peak_rss(workers) - before < 50 * 1024 * 1024


# -- declared output shapes that lie ------------------------------------------------
@pytest.mark.parametrize(
    "name,input_shape,output_shape,computed",
    [
        ("lies_about_rank", [2], [7, 7], [2]),
        ("lies_about_a_dim", [3], [4], [3]),
        ("lies_about_a_batch", ["N", 3], ["N", 5], [1, 3]),
    ],
)
def test_declared_output_shapes_that_contradict_the_graph_fail(
    server, tokens, name, input_shape, output_shape, computed
):
    status, answer = _upload(server, tokens["alice"], name, m.declared_shapes(input_shape, output_shape))
    assert status == 422, answer
    assert "output 'y'" in answer["error"] and str(computed) in answer["error"], answer
    status, version = request(server, "GET", f"/api/models/{name}/versions/1/", headers=bearer(tokens["alice"]))
    assert version["state"] == "FAILED" and answer["error"].endswith(version["reason"])


def test_declared_symbolic_dims_are_not_contradictions(server, tokens):
    status, answer = _upload(server, tokens["alice"], "honest", m.declared_shapes(["N", 3], ["N", 3]))
    assert status == 201 and answer["state"] == "READY", answer


# -- API tokens that expire -------------------------------------------------------------
def test_an_expired_token_is_refused_like_a_revoked_one(server, tokens):
    """``create_token --expires-in 4s``: the token works for inference (REST,
    gRPC) and the management API until then, and is refused after (401 /
    UNAUTHENTICATED) without waiting for any reload."""
    import grpc
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import InferenceServerException

    status, answer = _upload(server, tokens["alice"], "expiring", m.affine(3.0, 0.0))
    assert status == 201, answer
    token = manage(server, "create_token", "alice", "short-lived", "--expires-in", "4s").strip()
    issued = time.monotonic()
    x = np.array([[1.0, 2.0, 3.0, 4.0]], dtype=np.float32)
    status, result = _infer(server, token, "expiring", x)
    assert status == 200, result
    np.testing.assert_allclose(result["outputs"][0]["data"], (3 * x).ravel())
    assert request(server, "GET", "/api/models/expiring/", headers=bearer(token))[0] == 200
    client = grpcclient.InferenceServerClient(server.grpc_url)
    inp = grpcclient.InferInput("x", [1, 4], "FP32")
    inp.set_data_from_numpy(x)
    assert (
        client.infer("expiring", [inp], headers={"authorization": f"Bearer {token}"}).as_numpy("y").tolist()
        == (3 * x).tolist()
    )
    time.sleep(max(0.0, 4.2 - (time.monotonic() - issued)))
    status, result = _infer(server, token, "expiring", x)
    assert status == 401 and "expired" in result["error"], result
    status, result = request(server, "GET", "/api/models/expiring/", headers=bearer(token))
    assert status == 401 and "expired" in json.dumps(result), result
    with pytest.raises(InferenceServerException) as info:
        client.infer("expiring", [inp], headers={"authorization": f"Bearer {token}"})
    assert info.value.status() == str(grpc.StatusCode.UNAUTHENTICATED) and "expired" in info.value.message()
    client.close()
    assert _infer(server, tokens["alice"], "expiring", x)[0] == 200  # other tokens are unaffected


@pytest.mark.parametrize("spec", ["90d", "12h", "30m"])
def test_token_expiry_is_listed(server, tokens, spec):
    """The expiry is stored and listed (``--expires-in`` takes d, h, m, s)."""
    manage(server, "create_token", "carol", f"listed-{spec}", "--expires-in", spec)
    seconds = {"d": 86400, "h": 3600, "m": 60}[spec[-1]] * int(spec[:-1])
    out = manage(
        server,
        "shell",
        "-c",
        "from models_store.models import ApiToken; "
        f"t = ApiToken.objects.get(name='listed-{spec}'); print(round((t.expires_at - t.created_at).total_seconds()))",
    )
    assert abs(int(out.split()[-1]) - seconds) <= 2
