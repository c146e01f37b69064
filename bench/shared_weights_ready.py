"""Big versions with shared weights: ready when they say READY (issue 39, item 5).

In one run, each case without sharing (``SHARED_WEIGHTS_MIN_MB=0``) and
with it (the default threshold, 256 MiB), interleaved:

* **first inference of a version that arrives**: ``serve`` (two HTTP
  processes, one gRPC process, ``--model-control-mode poll``) runs; a model
  ``wide`` (``y = x @ W``, W FP32 [1024, N]) is moved into its repository;
  once ``/v2/models/wide/ready`` answers 200 (imported and validated), the
  time of the first inference (REST, x [1, 1024]). A 1.2 GB version (W
  inline) and a 3 GiB one (W in an external data file: past protobuf's
  2 GB). Compared with a *plain session load*: a fresh process that creates
  an ONNX Runtime session of the artifact and runs it once.
* **start**: ``serve`` started with the 1.2 GB model in its repository:
  seconds until ``/v2/health/ready`` (and gRPC) answer, and until the first
  inference has answered.

Usage: ``.venv/bin/python bench/shared_weights_ready.py [--small-mb 1200] [--big-mib 3072] [--rounds 1]``
(``--threshold-mb``: SHARED_WEIGHTS_MIN_MB with sharing, 256);
prints Markdown tables (medians over rounds). Needs about 6x the big model in
free disk and memory for one session of it; removes what it wrote.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support.server import LiveServer  # noqa: E402

ROWS = 1024
SHARING = {"without sharing": "0", "with sharing": "256"}


def build(directory: Path, nbytes: int, external: bool) -> Path:
    """The model ``wide`` (version 1) under ``directory``; returns the model directory."""
    from onnx import TensorProto, helper

    columns = nbytes // 4 // ROWS
    version = directory / "wide" / "1"
    version.mkdir(parents=True)
    rng = np.random.default_rng(0)
    weight = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[ROWS, columns])
    if external:
        with open(version / "model.onnx.data", "wb") as data:
            for _ in range(0, ROWS, 64):  # 64 rows at a time: never the whole weight in memory
                data.write(rng.standard_normal((64, columns), dtype=np.float32).tobytes())
        weight.data_location = TensorProto.EXTERNAL
        for key, value in (("location", "model.onnx.data"), ("offset", 0), ("length", ROWS * columns * 4)):
            weight.external_data.add(key=key, value=str(value))
    else:
        weight.raw_data = rng.standard_normal((ROWS, columns), dtype=np.float32).tobytes()
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])],
        "wide",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [-1, ROWS])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [-1, columns])],
        initializer=[weight],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    (version / "model.onnx").write_bytes(model.SerializeToString())
    return directory / "wide"


_PLAIN = """
import sys, time, numpy as np
sys.path.insert(0, sys.argv[2])
started = time.perf_counter()
from inference.runtime.onnx import create_session
session = create_session(sys.argv[1])
session.run(None, {"x": np.ones((1, 1024), np.float32)})
print(time.perf_counter() - started)
"""


def plain_load(model_dir: Path) -> float:
    """Seconds a fresh process takes to create a session of the artifact and run it once (imports excluded)."""
    out = subprocess.run(
        [sys.executable, "-c", _PLAIN, str(model_dir / "1" / "model.onnx"), str(ROOT)],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return float(out.stdout.strip().splitlines()[-1])


def _ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


def first_inference(server: LiveServer) -> float:
    import tritonclient.http as httpclient

    client = httpclient.InferenceServerClient(server.http_url, network_timeout=900, connection_timeout=900)
    inp = httpclient.InferInput("x", [1, ROWS], "FP32")
    inp.set_data_from_numpy(np.ones((1, ROWS), np.float32))
    started = time.perf_counter()
    client.infer("wide", [inp])
    took = time.perf_counter() - started
    client.close()
    return took


def arrival(model_dir: Path, work: Path, min_mb: str) -> dict:
    """A running server (poll mode) gets ``model_dir``: seconds to READY, then of the first inference."""
    repository, var = work / "repository", work / "var"
    repository.mkdir()
    env = {"SHARED_WEIGHTS_MIN_MB": min_mb, "MODEL_LOAD_WAIT_SECONDS": "900"}
    args = ("--model-control-mode", "poll", "--repository-poll-secs", "1")
    server = LiveServer(repository, var, extra_env=env, args=args).start(timeout=300)
    try:
        started = time.perf_counter()
        model_dir.rename(repository / "wide")
        while not _ok(f"http://{server.http_url}/v2/models/wide/ready"):
            if time.perf_counter() - started > 900:
                raise RuntimeError(f"wide never ready:\n{server.log()[-3000:]}")
            time.sleep(0.2)
        ready = time.perf_counter() - started
        return {"ready": ready, "first": first_inference(server)}
    finally:
        server.stop()
        (repository / "wide").rename(model_dir)
        shutil.rmtree(repository, ignore_errors=True)
        shutil.rmtree(var, ignore_errors=True)


def start(repository: Path, work: Path, min_mb: str) -> dict:
    """``serve`` started with the model in its repository: seconds until ready, then until the first answer."""
    var = work / "var"
    started = time.perf_counter()
    server = LiveServer(repository, var, extra_env={"SHARED_WEIGHTS_MIN_MB": min_mb}).start(timeout=900)
    try:
        ready = time.perf_counter() - started
        return {"ready": ready, "answered": ready + first_inference(server)}
    finally:
        server.stop()
        shutil.rmtree(var, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--small-mb", type=int, default=1200, help="the inline model, in MB (10^6 bytes)")
    parser.add_argument("--big-mib", type=int, default=3072, help="the external-data model, in MiB (0: none)")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--threshold-mb", default="256", help="SHARED_WEIGHTS_MIN_MB with sharing")
    args = parser.parse_args()
    SHARING["with sharing"] = args.threshold_mb
    work = Path(tempfile.mkdtemp(prefix="bench-shared-ready-"))
    try:
        models = {f"{args.small_mb / 1000:.1f} GB (inline)": build(work / "small", args.small_mb * 10**6, False)}
        if args.big_mib:
            models[f"{args.big_mib / 1024:.0f} GiB (external data)"] = build(work / "big", args.big_mib << 20, True)
        rows = []
        for name, model_dir in models.items():
            got: dict[str, list] = {label: [] for label in SHARING}
            plain: list[float] = []
            for _ in range(args.rounds):
                for label, min_mb in SHARING.items():  # interleaved
                    plain.append(plain_load(model_dir))
                    scratch = Path(tempfile.mkdtemp(dir=work))
                    got[label].append(arrival(model_dir, scratch, min_mb))
                    shutil.rmtree(scratch, ignore_errors=True)
            base = statistics.median(plain)
            for label in SHARING:
                first = statistics.median(g["first"] for g in got[label])
                ready = statistics.median(g["ready"] for g in got[label])
                rows.append(f"| {name} | {label} | {ready:.1f} | {first:.2f} | {base:.2f} | {first / base:.2f} |")
        print(f"load average: {os.getloadavg()[0]:.1f}")
        print("| version | sessions | arrival to READY s | first inference s | plain session load s | ratio |")
        print("|---|---|---:|---:|---:|---:|")
        print("\n".join(rows), flush=True)
        shutil.rmtree(work / "big", ignore_errors=True)
        repository = work / "small"
        starts: dict[str, list] = {label: [] for label in SHARING}
        for _ in range(args.rounds):
            for label, min_mb in SHARING.items():
                scratch = Path(tempfile.mkdtemp(dir=work))
                starts[label].append(start(repository, scratch, min_mb))
                shutil.rmtree(scratch, ignore_errors=True)
        print(f"\nload average: {os.getloadavg()[0]:.1f}")
        print(f"| serve started with the {args.small_mb / 1000:.1f} GB model | ready s | first answer s |")
        print("|---|---:|---:|")
        for label in SHARING:
            ready = statistics.median(s["ready"] for s in starts[label])
            answered = statistics.median(s["answered"] for s in starts[label])
            print(f"| {label} | {ready:.1f} | {answered:.1f} |")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
