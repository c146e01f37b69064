"""With INFERENCE_REQUIRE_TOKEN, a sequence belongs to the caller's team
(issue 23): the model belongs to team ml; another team's token cannot call
it at all (403), an operator's token (which may call it) cannot continue
ml's sequence (its own is another sequence of the same ID) nor disturb it,
and a second member of ml continues it. Over REST and gRPC, each on one
connection (one server process)."""

from __future__ import annotations

import uuid

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.support import onnx_models as m
from tests.support.live import people_with_tokens
from tests.support.server import LiveServer

pytestmark = pytest.mark.interop

RUN = uuid.uuid4().hex[:6]
STATE = 'state [ { input_name: "INPUT_STATE" output_name: "OUTPUT_STATE" data_type: TYPE_INT32 dims: [ 1 ] } ]'


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    repository = tmp_path_factory.mktemp("sequence-teams")
    m.write_model(
        repository, "acc", m.sequence_accumulator(), config=m.sequence_config("acc", kinds=("START",), state=STATE)
    )
    live = LiveServer(
        repository,
        tmp_path_factory.mktemp("sequence-teams-live"),
        extra_env={"INFERENCE_REQUIRE_TOKEN": "true", "REPOSITORY_TEAM": f"ml{RUN}"},
    )
    live.start()
    yield live
    assert live.stop() == 0, live.log()


@pytest.mark.parametrize("transport", ["http", "grpc"])
def test_another_team_cannot_continue_a_teams_sequence(server, transport):
    tokens = people_with_tokens(
        server,
        **{f"alice{transport}": f"ml{RUN}", f"carol{transport}": (f"ml{RUN}", f"vision{RUN}")},
        **{f"bob{transport}": f"vision{RUN}", f"root{transport}": "superuser"},
    )
    auth = {name: {"authorization": f"Bearer {tokens[name + transport]}"} for name in ("alice", "carol", "bob", "root")}
    module = httpclient if transport == "http" else grpcclient
    client = (
        httpclient.InferenceServerClient(server.http_url)
        if transport == "http"
        else grpcclient.InferenceServerClient(server.grpc_url)
    )

    def send(who, value, start=False):
        inp = module.InferInput("INPUT", [1, 1], "INT32")
        inp.set_data_from_numpy(np.full((1, 1), value, dtype=np.int32))
        headers = auth.get(who, {})
        return int(
            client.infer("acc", [inp], sequence_id=42, sequence_start=start, headers=headers).as_numpy("OUTPUT")[0][0]
        )

    def refused(who, value, start=False):
        with pytest.raises(InferenceServerException) as info:
            send(who, value, start)
        return str(info.value.status()), info.value.message()

    assert send("alice", 10, start=True) == 10
    status, message = refused("bob", 1)  # another team's token may not call the model at all
    assert status in ("403", "StatusCode.PERMISSION_DENIED") and "may not call model 'acc'" in message
    status, message = refused("nobody", 1)
    assert status in ("401", "StatusCode.UNAUTHENTICATED")
    status, message = refused("root", 1)  # an operator may call it, but ml's sequence is not the operator's
    assert status in ("400", "StatusCode.INVALID_ARGUMENT") and "must specify the START flag" in message
    assert send("root", 100, start=True) == 100  # the operator's own sequence 42
    assert send("carol", 5) == 15  # a member of ml (and of vision): team ml's sequence, untouched
    assert send("root", 1) == 101
    assert send("alice", 1) == 16
