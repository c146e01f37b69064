"""With tokens required, listing models (the repository index, statistics)
shows only what the caller's token may call, on REST and gRPC; and the
management API shows a team only its own models, versions and audit logs
(issue 22, F14), operators every model; a team's sequence (sequence
batching) is the team's (issue 23)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.support import onnx_models as m
from tests.support.live import bearer, manage, people_with_tokens, request, token_server, upload, wait_for

pytestmark = pytest.mark.interop


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    yield from token_server(tmp_path_factory, poll_seconds=1)


@pytest.fixture(scope="module")
def tokens(server):
    tokens = people_with_tokens(server, alice="ml", bob="vision", root="superuser", carol=("ml", "vision"))
    for user, team, model in (("alice", "ml", "ml-model"), ("bob", "vision", "vision-model")):
        status, answer = upload(server, tokens[user], model, m.affine(1.0, 0.0), team)
        assert status == 201, answer
    return tokens


def _index(server, token=None):
    headers = bearer(token) if token else {}
    return request(server, "POST", "/v2/repository/index", b"", headers)


def test_the_index_lists_only_the_callers_models(server, tokens):
    assert _index(server)[0] == 401
    status, entries = _index(server, tokens["alice"])
    assert status == 200 and {e["name"] for e in entries} == {"ml-model"}
    status, entries = _index(server, tokens["bob"])
    assert status == 200 and {e["name"] for e in entries} == {"vision-model"}
    status, entries = _index(server, tokens["root"])
    assert status == 200 and {e["name"] for e in entries} == {"ml-model", "vision-model", "legacy"}
    with grpcclient.InferenceServerClient(server.grpc_url) as client:

        def alices() -> set[str]:
            index = client.get_model_repository_index(headers={"authorization": f"Bearer {tokens['alice']}"})
            return {m.name for m in index.models}

        # The gRPC processes follow the registry within its poll (1 s here; a loaded machine: longer).
        assert wait_for(lambda: alices() == {"ml-model"}, timeout=15, interval=0.2), alices()
        with pytest.raises(InferenceServerException) as info:
            client.get_model_repository_index()
        assert info.value.status() == "StatusCode.UNAUTHENTICATED"


def test_statistics_list_only_the_callers_models(server, tokens):
    assert request(server, "GET", "/v2/models/stats")[0] == 401
    status, stats = request(server, "GET", "/v2/models/stats", headers=bearer(tokens["bob"]))
    assert status == 200 and {s["name"] for s in stats["model_stats"]} == {"vision-model"}
    status, answer = request(server, "GET", "/v2/models/ml-model/stats", headers=bearer(tokens["bob"]))
    assert status == 403 and "may not" in json.dumps(answer)
    status, stats = request(server, "GET", "/v2/models/ml-model/stats", headers=bearer(tokens["alice"]))
    assert status == 200 and [s["name"] for s in stats["model_stats"]] == ["ml-model"]
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        stats = client.get_inference_statistics(headers={"authorization": f"Bearer {tokens['root']}"})
        assert {s.name for s in stats.model_stats} == {"ml-model", "vision-model", "legacy"}


def _api(server, token, path, method="GET", body=b"", headers=None):
    return request(server, method, f"/api/models/{path}", body, {**bearer(token), **(headers or {})})


def test_the_management_api_shows_a_team_only_its_own_models(server, tokens):
    """F14, the attack as found: a team-B token listed every team's models and
    read team A's audit log over the management API while the data plane
    answered 403 for the same model. Now: another team's model is missing
    from the list and answers 404 on every route, exactly as a model that
    does not exist; operators see every model."""
    status, listing = _api(server, tokens["bob"], "")
    assert status == 200 and [m["name"] for m in listing["results"]] == ["vision-model"]
    status, listing = _api(server, tokens["alice"], "")
    assert status == 200 and [m["name"] for m in listing["results"]] == ["ml-model"]
    status, listing = _api(server, tokens["root"], "")
    assert status == 200 and [m["name"] for m in listing["results"]] == ["legacy", "ml-model", "vision-model"]

    for path in ("ml-model/", "ml-model/versions/", "ml-model/versions/1/", "ml-model/audit/"):
        status, answer = _api(server, tokens["bob"], path)
        assert (status, answer) == (404, {"error": "unknown model 'ml-model'"}), path
        status, missing = _api(server, tokens["bob"], path.replace("ml-model", "no-such-model"))
        assert (status, missing) == (404, {"error": "unknown model 'no-such-model'"}), path
        assert _api(server, tokens["alice"], path)[0] == 200 and _api(server, tokens["root"], path)[0] == 200, path
    events = _api(server, tokens["alice"], "ml-model/audit/")[1]["results"]
    assert "version.upload" in [e["action"] for e in events] and {e["model_name"] for e in events} == {"ml-model"}
    status, events = _api(server, tokens["root"], "vision-model/audit/")
    assert status == 200 and "version.upload" in [e["action"] for e in events["results"]]
    assert _api(server, tokens["alice"], "legacy/")[0] == 404  # operator-owned: the operators'
    # A change is answered like a read: 404, not a 403 naming the owner.
    body = json.dumps({"description": "mine now"}).encode()
    status, answer = _api(server, tokens["bob"], "ml-model/", "PATCH", body, {"Content-Type": "application/json"})
    assert (status, answer) == (404, {"error": "unknown model 'ml-model'"})
    assert _api(server, tokens["bob"], "ml-model/versions/1/", "DELETE")[0] == 404
    # The data plane agrees: bob may not call it either.
    body = json.dumps({"inputs": [{"name": "x", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4]}]})
    assert request(server, "POST", "/v2/models/ml-model/infer", body.encode(), bearer(tokens["bob"]))[0] == 403
    status, model = _api(server, tokens["alice"], "ml-model/")
    assert status == 200 and model["description"] != "mine now" and [v["number"] for v in model["versions"]] == [1]


STATE = 'state [ { input_name: "INPUT_STATE" output_name: "OUTPUT_STATE" data_type: TYPE_INT32 dims: [ 1 ] } ]'


@pytest.mark.parametrize("transport", ["http", "grpc"])
def test_another_team_cannot_continue_a_teams_sequence(server, tokens, tmp_path, transport):
    """A sequence belongs to the caller's team: on team ml's stateful model
    (an accumulator with implicit state), vision's token cannot call it at
    all (403); an operator's token, which may call it, cannot continue ml's
    sequence (the operator's is another sequence of the same ID) nor disturb
    it; carol, in ml and vision, continues it as ml. One connection (one
    server process) for every caller."""
    if transport == "http":  # imported for team ml once, on the first run
        repository = tmp_path / "repo"
        config = m.sequence_config("ml-sequence", kinds=("START",), state=STATE)
        m.write_model(repository, "ml-sequence", m.sequence_accumulator(), config=config)
        manage(server, "import_repository", str(repository), "--team", "ml")
    module = httpclient if transport == "http" else grpcclient
    client = module.InferenceServerClient(server.http_url if transport == "http" else server.grpc_url)

    def send(who: str, value: int, start: bool = False) -> int:
        inp = module.InferInput("INPUT", [1, 1], "INT32")
        inp.set_data_from_numpy(np.full((1, 1), value, dtype=np.int32))
        headers = {"authorization": f"Bearer {tokens[who]}"} if who in tokens else {}
        result = client.infer("ml-sequence", [inp], sequence_id=42, sequence_start=start, headers=headers)
        return int(result.as_numpy("OUTPUT")[0][0])

    def refused(who: str) -> tuple[str, str]:
        with pytest.raises(InferenceServerException) as info:
            send(who, 1)
        return str(info.value.status()), info.value.message()

    assert send("alice", 10, start=True) == 10
    status, message = refused("bob")  # another team's token may not call the model at all
    assert status in ("403", "StatusCode.PERMISSION_DENIED") and "may not call model 'ml-sequence'" in message
    assert refused("nobody")[0] in ("401", "StatusCode.UNAUTHENTICATED")
    status, message = refused("root")  # an operator may call it, but ml's sequence is not the operator's
    assert status in ("400", "StatusCode.INVALID_ARGUMENT") and "must specify the START flag" in message
    assert send("root", 100, start=True) == 100  # the operator's own sequence 42
    assert send("carol", 5) == 15  # team ml's sequence, untouched
    assert send("root", 1) == 101
    assert send("alice", 1) == 16


def test_shared_memory_regions_need_a_token_when_inference_does(server, tokens):
    """With tokens required, system shared memory needs one too (status,
    register, unregister; REST and gRPC), and a team's region serves its
    team's inference while another team does not even see it."""
    import uuid

    import tritonclient.utils.shared_memory as shm

    key = f"/mh-access-{uuid.uuid4().hex[:12]}"
    x = np.linspace(-2, 2, 8, dtype=np.float32).reshape(2, 4)
    handle = shm.create_shared_memory_region("x", key, 64)
    try:
        shm.set_shared_memory_region(handle, [x])
        http = httpclient.InferenceServerClient(server.http_url)
        register = json.dumps({"key": key, "offset": 0, "byte_size": 64}).encode()
        assert request(server, "GET", "/v2/systemsharedmemory/status")[0] == 401
        assert request(server, "POST", "/v2/systemsharedmemory/region/x/register", register)[0] == 401
        assert request(server, "POST", "/v2/systemsharedmemory/unregister")[0] == 401
        with grpcclient.InferenceServerClient(server.grpc_url) as client:
            with pytest.raises(InferenceServerException) as info:
                client.get_system_shared_memory_status()
            assert info.value.status() == "StatusCode.UNAUTHENTICATED"
        alice = bearer(tokens["alice"])
        http.register_system_shared_memory("x", key, 64, headers=alice)
        assert [r["name"] for r in http.get_system_shared_memory_status(headers=alice)] == ["x"]
        assert http.get_system_shared_memory_status(headers=bearer(tokens["bob"])) == []
        inp = httpclient.InferInput("x", [2, 4], "FP32")
        inp.set_shared_memory("x", 32)
        np.testing.assert_array_equal(http.infer("ml-model", [inp], headers=alice).as_numpy("y"), x)  # y = x
        http.unregister_system_shared_memory(headers=alice)
    finally:
        shm.destroy_shared_memory_region(handle)


def test_without_required_tokens_listing_stays_open(tmp_path):
    """The default (INFERENCE_REQUIRE_TOKEN off): the index answers anyone, as Triton does."""
    from tests.support.server import LiveServer

    repository = tmp_path / "repo"
    m.write_model(repository, "open", m.affine(1.0, 0.0))
    live = LiveServer(repository, tmp_path / "live").start()
    try:
        status, entries = _index(live)
        assert status == 200 and [e["name"] for e in entries] == ["open"]
        assert manage(live, "create_user", "x", "--team", "t")  # a user does not change that
        assert _index(live)[0] == 200
    finally:
        assert live.stop() == 0
