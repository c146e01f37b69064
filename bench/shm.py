"""System shared memory against tensors in the HTTP body, measured with
Triton's perf_analyzer (not a timed test).

Starts one ``serve`` (tests/support/server.py; in process, or with
``--workers`` in worker mode: one CPU worker over Redis, on this machine, so
that it maps the regions itself) on two models: the bench's ``cnn`` (FP32
[1, 3, 224, 224], 588 KiB in, 40 B out) and ``big`` (FP32 [1, 4194304], a
16 MiB input, reduced to its mean, 4 B out). For each model and round it
runs perf_analyzer (``.venv/tools/perf_analyzer``, see bench/perf_analyzer.py)
over HTTP at concurrency 1, once with the tensors in the request and
response bodies (binary tensor data) and once with ``--shared-memory
system`` (perf_analyzer registers its regions, writes the inputs once and
names them in each request; the outputs come back in regions), alternating
which goes first, and prints per-round throughput and p50, the medians over
rounds and the ratios (shared memory / body).

    .venv/bin/python bench/shm.py [--rounds 3] [--seconds 4] [--protocol http|grpc] [--workers]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
from onnx import TensorProto, helper  # noqa: E402

from bench.models import build_cnn  # noqa: E402
from bench.perf_analyzer import BINARY, INSTALL, parse  # noqa: E402
from tests.support.server import LiveServer  # noqa: E402

BIG_ELEMENTS = 4 * 1024 * 1024  # FP32: 16 MB
#: (model, input shape for perf_analyzer, output bytes)
MODELS = (("cnn", "image:1,3,224,224", 40), ("big", f"x:1,{BIG_ELEMENTS}", 4))


def build_big() -> bytes:
    """x FP32 [1, 4194304] (16 MB) -> its mean, y FP32 [1, 1]."""
    graph = helper.make_graph(
        [helper.make_node("ReduceMean", ["x"], ["y"], axes=[1], keepdims=1)],
        "big",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, BIG_ELEMENTS])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="bench")
    model.ir_version = 8
    return model.SerializeToString()


def run(address: str, protocol: str, model: str, shape: str, output_bytes: int, shared: bool, seconds: float):
    window_ms = max(500, round(seconds * 1000 / 3))
    command = [
        str(BINARY), "-m", model, "-u", address, "-i", protocol, "--concurrency-range", "1:1",
        "--measurement-mode", "time_windows", "--measurement-interval", str(window_ms), "--max-trials", "3",
        "--stability-percentage", "999", "--input-data", "random", "--shape", shape,
    ]  # fmt: skip
    if shared:
        command += ["--shared-memory", "system", "--output-shared-memory-size", str(output_bytes)]
    out = subprocess.run(command, capture_output=True, text=True, timeout=seconds * 4 + 120)
    if out.returncode != 0:
        raise RuntimeError(f"perf_analyzer failed ({out.returncode}): {' '.join(command)}\n{out.stdout}{out.stderr}")
    return parse(out.stdout, seconds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=4.0, help="measured seconds per cell (3 windows)")
    parser.add_argument("--protocol", choices=("http", "grpc"), default="http")
    parser.add_argument("--workers", action="store_true", help="worker mode: one CPU worker on this machine")
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/12", help="Redis of --workers (flushed)")
    args = parser.parse_args()
    if not BINARY.exists():
        sys.exit(f"perf_analyzer is not installed; install it with: {INSTALL}")
    with tempfile.TemporaryDirectory(prefix="shm-bench-") as work:
        work = Path(work)
        repository = work / "repository"
        for name, payload in (("cnn", build_cnn()), ("big", build_big())):
            (repository / name / "1").mkdir(parents=True)
            (repository / name / "1" / "model.onnx").write_bytes(payload)
        env, devices = {"MAX_REQUEST_BYTES": str(64 * 1024 * 1024)}, ()
        if args.workers:
            import redis

            redis.Redis.from_url(args.redis).flushdb()
            env.update(INFERENCE_EXECUTOR="workers", REDIS_URL=args.redis)
            devices = ("cpu",)
        server = LiveServer(repository, work / "var", extra_env=env, devices=devices)
        server.start()
        try:
            if devices:
                server.wait_for_workers()
            address = server.http_url if args.protocol == "http" else server.grpc_url
            results: dict[tuple[str, bool], list] = {}
            for model, shape, out_bytes in MODELS:  # warm-up: every process loads the model, both ways
                for shared in (False, True):
                    run(address, args.protocol, model, shape, out_bytes, shared, 1.5)
            for round_ in range(args.rounds):
                for model, shape, out_bytes in MODELS:
                    for shared in (False, True) if round_ % 2 == 0 else (True, False):
                        result = run(address, args.protocol, model, shape, out_bytes, shared, args.seconds)
                        results.setdefault((model, shared), []).append(result)
                        way = "shared memory" if shared else "body"
                        print(
                            f"round {round_ + 1} {model:4} {way:13}: {result.rps:8.1f} infer/s, "
                            f"p50 {result.p50_ms:7.3f} ms"
                        )
            mode = "worker mode (a worker on this machine)" if args.workers else "in process"
            print(f"\nmedians over {args.rounds} rounds, {args.protocol.upper()}, concurrency 1, {mode}:")
            print("| model | input | body infer/s | shm infer/s | ratio | body p50 ms | shm p50 ms | ratio |")
            print("|---|---|---|---|---|---|---|---|")
            for model, shape, _out in MODELS:
                body, shared = results[(model, False)], results[(model, True)]
                rps = [statistics.median(r.rps for r in rs) for rs in (body, shared)]
                p50 = [statistics.median(r.p50_ms for r in rs) for rs in (body, shared)]
                size = np.prod([int(d) for d in shape.split(":")[1].split(",")]) * 4
                print(
                    f"| {model} | {size / 2**20:.2f} MiB | {rps[0]:.1f} | {rps[1]:.1f} | {rps[1] / rps[0]:.2f}x "
                    f"| {p50[0]:.3f} | {p50[1]:.3f} | {p50[1] / p50[0]:.2f}x |"
                )
        finally:
            server.stop()


if __name__ == "__main__":
    main()
