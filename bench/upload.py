"""A single-file upload's time to its answer and the uploading process's
memory (issue 39, item 4: uploads answer at once).

Writes a ``--gb`` GB (10^9 bytes) ONNX model as one file, ``y = ReduceSum(x @ W)`` with x FP32
[1, 1024] and W FP32 [1024, n] inline in the file (zeros but ``W[0, 0] = 1``, so
that x of ones answers exactly 1.0). The file is written as protobuf fields
around the weight's bytes, a hole on disk, so building it needs neither the
memory nor the time of 1.2 GB (onnx merges the two ``graph`` fields it holds,
as protobuf does). Starts ``manage.py serve`` (the embedded default: SQLite,
ONNX Runtime in process, one HTTP process, ``MAX_UPLOAD_BYTES`` raised to fit)
and uploads the file in one multipart request streamed from disk (the
management API with a token), then follows the version to READY and calls it
once. Reports the seconds from the body's last byte to the answer, the
answer, the uploading process's peak RSS while the request ran (sampled every
20 ms, and its kernel high-water mark when the answer came) above its RSS
before, the time to READY and the process's peak RSS until then (the
validation, in the embedded server's background thread). The generated files are deleted afterwards.

With ``--baseline DIR`` (a checkout of an earlier commit), its server is
measured too, first, in the same run (same Python environment).

Usage: ``.venv/bin/python bench/upload.py [--gb 1.2] [--baseline DIR]``; prints a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.big_upload import stream_upload  # noqa: E402
from tests.support import live as live_module  # noqa: E402
from tests.support import server as server_module  # noqa: E402
from tests.support.live import people_with_tokens, request  # noqa: E402
from tests.support.rss import process_tree, status_kib  # noqa: E402
from tests.support.server import LiveServer  # noqa: E402

ROWS = 1024
CHUNK = 8 * 2**20


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _field(number: int, payload_length: int) -> bytes:
    """The tag and length of a length-delimited protobuf field."""
    return _varint(number << 3 | 2) + _varint(payload_length)


def build(path: Path, gb: float) -> int:
    """Write the model to ``path``; returns its size in bytes."""
    from onnx import TensorProto, helper

    columns = max(1, int(gb * 1e9 / 4 / ROWS))
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("ReduceSum", ["m"], ["y"], keepdims=1)],
        "big",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, ROWS])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    tensor = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[ROWS, columns]).SerializeToString()
    data = ROWS * columns * 4
    tensor_length = len(tensor) + len(_field(9, data)) + data  # TensorProto.raw_data = 9
    initializer = _field(5, tensor_length)  # GraphProto.initializer = 5
    head = model.SerializeToString() + _field(7, len(initializer) + tensor_length) + initializer  # ModelProto.graph
    with open(path, "wb") as handle:
        handle.write(head + tensor + _field(9, data) + np.float32(1.0).tobytes())
        handle.truncate(handle.tell() - 4 + data)  # the rest of W: zeros, a hole on disk
    return path.stat().st_size


def upload(server: LiveServer, token: str, name: str, model: Path) -> tuple[int, dict, float]:
    """POST the file as multipart field ``file`` streamed from disk: (status, answer, seconds from
    the body's last byte to the answer)."""
    times: list[float] = []
    status, answer = stream_upload(server, token, name, model, [], times)
    return status, answer, times[1] - times[0]


def _http_worker(server: LiveServer) -> int:
    """The pid of the server's one granian worker (the process that answers requests: a granian
    process whose parent is granian's main process)."""
    tree = process_tree(server.process.pid)
    granian = [pid for pid in tree if b"granian" in (Path("/proc") / str(pid) / "cmdline").read_bytes()]
    (worker,) = [pid for pid in granian if _parent(pid) in granian]
    return worker


def _parent(pid: int) -> int:
    return int((Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[1])


def measure(gb: float, root: Path) -> dict:
    """One server of the checkout at ``root`` (its ``manage.py``), one upload."""
    server_module.ROOT = live_module.ROOT = root  # where serve and manage.py shell run
    work = Path(tempfile.mkdtemp(prefix="bench-upload-"))
    try:
        model = work / "model.onnx"
        size = build(model, gb)
        server = LiveServer(
            work / "repository", work / "var", workers=1, extra_env={"MAX_UPLOAD_BYTES": str(size + 2**26)}
        )
        (work / "repository").mkdir()
        server.start(timeout=180)
        try:
            token = people_with_tokens(server, alice="ml")["alice"]
            worker = _http_worker(server)
            time.sleep(1)
            idle = status_kib(worker, "VmRSS") / 1024
            peak, stop = [idle], threading.Event()

            def sample():
                while not stop.is_set():
                    peak.append(status_kib(worker, "VmRSS") / 1024)
                    time.sleep(0.02)

            sampler = threading.Thread(target=sample, daemon=True)
            sampler.start()
            started = time.perf_counter()
            status, answer, after_body = upload(server, token, "big", model)
            high_water = status_kib(worker, "VmHWM") / 1024
            request_peak = max(peak)
            assert status in (201, 202), answer
            state = answer["state"]
            while state not in ("READY", "FAILED"):
                time.sleep(0.5)
                state = request(
                    server, "GET", "/api/models/big/versions/1/", headers={"Authorization": f"Bearer {token}"}
                )[1]["state"]
            ready = time.perf_counter() - started
            stop.set()
            sampler.join()
            assert state == "READY", state
            body = {"inputs": [{"name": "x", "shape": [1, ROWS], "datatype": "FP32", "data": [1.0] * ROWS}]}
            code, result = request(
                server, "POST", "/v2/models/big/infer", json.dumps(body).encode(),
                {"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
            )  # fmt: skip
            assert code == 200 and result["outputs"][0]["data"] == [1.0], result
            return {
                "size": size, "status": status, "state": answer["state"], "after_body": after_body,
                "request_peak": request_peak - idle, "high_water": high_water - idle, "ready": ready,
                "validation_peak": max(peak) - idle,
            }  # fmt: skip
        finally:
            server.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gb", type=float, default=1.2)
    parser.add_argument("--baseline", type=Path, help="a checkout of an earlier commit to measure first")
    args = parser.parse_args()
    targets = [(f"baseline ({args.baseline.name})", args.baseline)] if args.baseline else []
    targets.append(("this checkout", ROOT))
    rows = [(name, measure(args.gb, root.resolve())) for name, root in targets]
    print(
        "| code | file | answer | body's end to answer s | uploading process peak RSS above idle during the "
        "request MiB | its VmHWM above idle at the answer MiB | upload start to READY s | its peak RSS above "
        "idle until READY MiB |"
    )
    print("|---|---:|---|---:|---:|---:|---:|---:|")
    for name, r in rows:
        print(
            f"| {name} | {r['size'] / 1e9:.2f} GB | {r['status']} {r['state']} | {r['after_body']:.2f} "
            f"| {r['request_peak']:.0f} | {r['high_water']:.0f} | {r['ready']:.1f} | {r['validation_peak']:.0f} |"
        )


if __name__ == "__main__":
    main()
