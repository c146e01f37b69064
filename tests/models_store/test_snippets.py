"""Client snippets: filled with the signature, valid for every datatype and size.
(They are run against a live server in tests/interop/test_store_live.py.)"""

from __future__ import annotations

import contextlib
import io
import json
import shlex

import numpy as np

from models_store.registry import snippets

SIGNATURE = [
    {"name": "image", "datatype": "FP32", "shape": [-1, 3, 16, 16]},  # 768 elements: generated, not inlined
    {"name": "tag", "datatype": "BYTES", "shape": [-1, 1]},
    {"name": "mask", "datatype": "BOOL", "shape": [2]},
    {"name": "ids", "datatype": "INT64", "shape": [-1]},
]


def _run_python(code: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(code, {})
    return out.getvalue()


def _one_liner(shell: str) -> str:
    """The python program of ``python3 -c '...' | curl ...``."""
    return shlex.split(shell.split("\\\n|")[0])[2]


def test_example_request_follows_the_signature():
    request = snippets.example_request(SIGNATURE[1:])
    assert request == {
        "inputs": [
            {"name": "tag", "shape": [1, 1], "datatype": "BYTES", "data": [[""]]},
            {"name": "mask", "shape": [2], "datatype": "BOOL", "data": [False, False]},
            {"name": "ids", "shape": [1], "datatype": "INT64", "data": [0]},
        ]
    }
    assert json.loads(snippets.example_request_text(SIGNATURE[1:])) == request


def test_big_bodies_are_generated_by_a_python_one_liner():
    by_key = {s.key: s for s in snippets.snippets("m", 3, SIGNATURE, [], "h:8000", "h:8001", token=False)}
    v2 = json.loads(_run_python(_one_liner(by_key["curl-v2"].code)))
    assert [(i["name"], i["shape"], i["datatype"]) for i in v2["inputs"]] == [
        (t["name"], snippets.concrete_shape(t["shape"]), t["datatype"]) for t in SIGNATURE
    ]
    assert np.asarray(v2["inputs"][0]["data"]).shape == (1, 3, 16, 16)
    assert v2["inputs"][1]["data"] == [[""]] and v2["inputs"][2]["data"] == [False, False]
    tf = json.loads(_run_python(_one_liner(by_key["curl-tfserving"].code)))
    assert set(tf["inputs"]) == {"image", "tag", "mask", "ids"} and tf["inputs"]["ids"] == [0]
    assert "http://h:8000/v2/models/m/versions/3/infer" in by_key["curl-v2"].code
    assert "http://h:8000/v1/models/m/versions/3:predict" in by_key["curl-tfserving"].code
    assert "MODELHOST_TOKEN" not in by_key["curl-v2"].code


def test_tritonclient_snippets_build_the_inputs():
    by_key = {s.key: s for s in snippets.snippets("m", 3, SIGNATURE, [{"name": "out"}], "h:8000", "h:8001", True)}
    grpc = by_key["tritonclient-grpc"].code
    assert 'grpcclient.InferenceServerClient("h:8001")' in grpc
    assert 'grpcclient.InferInput("tag", [1, 1], "BYTES")' in grpc
    assert 'np.full([1, 1], b"", dtype=np.object_)' in grpc
    assert "np.zeros([2], dtype=np.bool)" in grpc
    assert 'headers={"authorization": "Bearer " + os.environ["MODELHOST_TOKEN"]}' in grpc  # gRPC metadata: lowercase
    assert 'headers={"Authorization": "Bearer ' in by_key["tritonclient-http"].code
    assert '-H "Authorization: Bearer $MODELHOST_TOKEN"' in by_key["curl-v2"].code
    for snippet in by_key.values():
        if snippet.language == "python":
            compile(snippet.code, snippet.key, "exec")
