"""Memory per model with weights shared by the machine's processes (issue 26, item 1).

Starts ``manage.py serve`` in process (two HTTP processes and one gRPC
process, each with its own ONNX Runtime session of each model it serves)
with one model ``wide``: ``y = x @ W``, W FP32 [1024, N] of ``--mib`` MiB.
Calls it from every process (new HTTP connections until both HTTP processes
answered, then gRPC), then reads the proportional set size (Pss, which
counts a page shared by k processes 1/k to each) of the server's processes.
Runs twice in one go: each session with its own copy (SHARED_WEIGHTS_MIN_MB=0)
and with the machine's one copy (SHARED_WEIGHTS_MIN_MB=1), and reports the
memory the model adds, its per-request latency (c=1, REST binary, median
of ``--requests``) and first-request time.

Usage: ``.venv/bin/python bench/shared_weights.py [--mib 512] [--requests 50]``; prints a Markdown table.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support import onnx_models as m  # noqa: E402
from tests.support.rss import process_tree  # noqa: E402
from tests.support.server import LiveServer  # noqa: E402

ROWS = 1024


def build(repository: Path, mib: int) -> None:
    from onnx import TensorProto, helper, numpy_helper

    columns = mib * 2**20 // 4 // ROWS
    weight = np.random.default_rng(0).standard_normal((ROWS, columns), dtype=np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])],
        "wide",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [-1, ROWS])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [-1, columns])],
        initializer=[numpy_helper.from_array(weight, "w")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    m.write_model(repository, "wide", model.SerializeToString())


def pss_mib(pids) -> float:
    total = 0
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    total += int(line.split()[1])
        except OSError:
            pass
    return total / 1024


def measure(repository: Path, work: Path, min_mb: int, requests: int) -> dict:
    import tritonclient.grpc as grpcclient
    import tritonclient.http as httpclient

    server = LiveServer(repository, work, extra_env={"SHARED_WEIGHTS_MIN_MB": str(min_mb)}).start(timeout=120)
    try:
        time.sleep(1)
        idle = pss_mib(process_tree(server.process.pid))
        x = np.ones((1, ROWS), np.float32)
        first = None
        latencies = []
        for i in range(max(requests, 12)):  # new connections: both HTTP processes load and answer
            client = httpclient.InferenceServerClient(server.http_url)
            inp = httpclient.InferInput("x", [1, ROWS], "FP32")
            inp.set_data_from_numpy(x, binary_data=True)
            started = time.perf_counter()
            client.infer("wide", [inp], outputs=[httpclient.InferRequestedOutput("y", binary_data=True)])
            took = (time.perf_counter() - started) * 1000
            first = took if first is None else first
            if i >= 12:
                latencies.append(took)
            client.close()
        ginp = grpcclient.InferInput("x", [1, ROWS], "FP32")
        ginp.set_data_from_numpy(x)
        grpcclient.InferenceServerClient(server.grpc_url).infer("wide", [ginp])
        time.sleep(0.5)
        loaded = pss_mib(process_tree(server.process.pid))
        return {"added": loaded - idle, "p50": statistics.median(latencies), "first": first}
    finally:
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mib", type=int, default=512)
    parser.add_argument("--requests", type=int, default=50)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-shared-weights-"))
    build(work / "repository", args.mib)
    print("| sessions | Pss added by the model, MiB (3 processes) | x model size | p50 ms (c=1) | first request ms |")
    print("|---|---:|---:|---:|---:|")
    for label, min_mb in (("each its own copy (SHARED_WEIGHTS_MIN_MB=0)", 0), ("the machine's one copy", 1)):
        got = measure(work / "repository", work / f"var-{min_mb}", min_mb, args.requests)
        print(
            f"| {label} | {got['added']:.0f} | {got['added'] / args.mib:.2f} | {got['p50']:.1f} | {got['first']:.0f} |"
        )


if __name__ == "__main__":
    main()
