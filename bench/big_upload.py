"""A model past 2 GB with external data: upload, validation and serving on
this machine (issue 26, item 3).

Builds a model of ``--gib`` GiB: ``y = sum_i sum(x @ W_i)``, x FP32 [1, 1024],
y FP32 [1, 1], each ``W_i`` a 512 MiB FP32 [1024, 131072] weight in its own
external data file (zeros but for ``W_i[0, 0] = i + 1``, so the answer for x
of ones is exact; every inference reads every weight, as a real model does).
Starts ``manage.py serve``
(the embedded default: SQLite, ONNX Runtime in process, ``MAX_UPLOAD_BYTES``
raised to fit), uploads the model file and its data files in one multipart
request streamed from disk (the management API with a token), follows the
version to READY, and calls it once. Reports the upload's time and answer
(202: validated in the background), the time to READY, the first inference
(the session's load), and the peak resident memory of the server's processes
above idle, as a multiple of the model's size.

Usage: ``.venv/bin/python bench/big_upload.py [--gib 3]``; prints a Markdown table.
"""

from __future__ import annotations

import argparse
import http.client
import json
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support.live import people_with_tokens, request  # noqa: E402
from tests.support.rss import process_tree, status_kib  # noqa: E402
from tests.support.server import LiveServer  # noqa: E402

PART = 512 * 2**20  # bytes per external data file


def build(directory: Path, gib: float) -> tuple[Path, list[Path], float]:
    """The model file, its data files, and the sum its answer adds to x."""
    from onnx import TensorProto, external_data_helper, helper, numpy_helper, save

    count = max(1, round(gib * 2**30 / PART))
    rows = 1024
    nodes, initializers, data, last = [], [], [], None
    for i in range(count):
        path = directory / f"w{i}.bin"
        with open(path, "wb") as handle:  # zeros but the first element: written sparse, read back as zeros
            handle.write(np.float32(i + 1).tobytes())
            handle.truncate(PART)
        data.append(path)
        tensor = numpy_helper.from_array(np.zeros(1, np.float32), f"w{i}")
        tensor.dims[:] = [rows, PART // 4 // rows]
        external_data_helper.set_external_data(tensor, location=path.name, offset=0, length=PART)
        tensor.ClearField("raw_data")
        tensor.data_location = TensorProto.EXTERNAL
        initializers.append(tensor)
        nodes.append(helper.make_node("MatMul", ["x", f"w{i}"], [f"m{i}"]))
        total = "y" if i == count - 1 else f"a{i}"
        nodes.append(helper.make_node("ReduceSum", [f"m{i}"], [total if last is None else f"s{i}"], keepdims=1))
        if last is not None:
            nodes.append(helper.make_node("Add", [last, f"s{i}"], [total]))
        last = total
    graph = helper.make_graph(
        nodes,
        "big",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, rows])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1])],
        initializer=initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    model_path = directory / "model.onnx"
    save(model, model_path)
    return model_path, data, float(sum(range(1, count + 1)))


def stream_upload(
    server: LiveServer, token: str, name: str, model: Path, data: list[Path], times: list | None = None
) -> tuple[int, dict]:
    """POST the model and its data files as one multipart body, read from disk in 8 MiB chunks;
    ``times`` (a list) gets the ``perf_counter`` of the body's end and of the answer."""
    boundary = uuid.uuid4().hex
    pieces: list[bytes | Path] = [f'--{boundary}\r\nContent-Disposition: form-data; name="team"\r\n\r\nml\r\n'.encode()]
    for field, path in [("file", model), *(("data", p) for p in data)]:
        pieces.append(
            f'--{boundary}\r\nContent-Disposition: form-data; name="{field}"; filename="{path.name}"\r\n'
            "Content-Type: application/octet-stream\r\n\r\n".encode()
        )
        pieces += [path, b"\r\n"]
    pieces.append(f"--{boundary}--\r\n".encode())
    length = sum(p.stat().st_size if isinstance(p, Path) else len(p) for p in pieces)

    def body():
        for piece in pieces:
            if isinstance(piece, bytes):
                yield piece
                continue
            with open(piece, "rb") as handle:
                while chunk := handle.read(8 * 2**20):
                    yield chunk
        if times is not None:
            times.append(time.perf_counter())  # asked for more after the last piece went out

    host, port = server.http_url.split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=600)
    try:
        headers = {
            "Authorization": f"Bearer {token}",
            "Content-Type": f"multipart/form-data; boundary={boundary}",
            "Content-Length": str(length),
        }
        conn.request("POST", f"/api/models/{name}/versions/", body=body(), headers=headers)
        response = conn.getresponse()
        if times is not None:
            times.append(time.perf_counter())
        return response.status, json.loads(response.read())
    finally:
        conn.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gib", type=float, default=3.0)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-big-upload-"))
    (work / "model").mkdir()
    (work / "repository").mkdir()
    model, data, added = build(work / "model", args.gib)
    size = model.stat().st_size + sum(p.stat().st_size for p in data)
    server = LiveServer(work / "repository", work / "var", extra_env={"MAX_UPLOAD_BYTES": str(size + 2**26)}).start(
        timeout=120
    )
    try:
        token = people_with_tokens(server, alice="ml")["alice"]
        time.sleep(1)
        idle = sum(status_kib(p, "VmRSS") for p in process_tree(server.process.pid)) / 1024
        peak, stop = [idle], threading.Event()

        def sample():
            while not stop.is_set():
                peak.append(sum(status_kib(p, "VmRSS") for p in process_tree(server.process.pid)) / 1024)
                time.sleep(0.05)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        started = time.perf_counter()
        status, answer = stream_upload(server, token, "big", model, data)
        uploaded = time.perf_counter() - started
        assert status in (201, 202), answer
        state = answer["state"]
        while state not in ("READY", "FAILED"):
            time.sleep(0.2)
            state = request(server, "GET", "/api/models/big/versions/1/", headers={"Authorization": f"Bearer {token}"})[
                1
            ]["state"]
        ready = time.perf_counter() - started
        validation_peak = max(peak)
        assert state == "READY", state
        body = {"inputs": [{"name": "x", "shape": [1, 1024], "datatype": "FP32", "data": [1.0] * 1024}]}
        first = time.perf_counter()
        code, result = request(
            server, "POST", "/v2/models/big/infer", json.dumps(body).encode(),
            {"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        )  # fmt: skip
        first_inference = time.perf_counter() - first
        assert code == 200, result
        assert result["outputs"][0]["data"] == [added], result
        stop.set()
        sampler.join()
        gib = size / 2**30
        print("| model | upload answer | upload s | READY after s | validation peak above idle GiB | x size "
              "| first inference s | peak overall above idle GiB |")  # fmt: skip
        print("|---|---|---:|---:|---:|---:|---:|---:|")
        print(
            f"| {gib:.2f} GiB ({len(data)} data files) | {status} {answer['state']} | {uploaded:.1f} | {ready:.1f} "
            f"| {(validation_peak - idle) / 1024:.2f} | {(validation_peak - idle) / 1024 / gib:.2f} "
            f"| {first_inference:.1f} | {(max(peak) - idle) / 1024:.2f} |"
        )
    finally:
        server.stop()


if __name__ == "__main__":
    main()
