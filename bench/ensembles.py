"""What an ensemble costs (issue 28, item 1): a three-step ensemble of tiny
models against one request to one tiny model, in one ``manage.py serve``
(in process; with ``--modes inprocess,workers`` also in worker mode: one
CPU worker over its Unix socket, where the three steps go to the worker as
one message).

The repository holds ``tiny`` (FP32 y = 2x + 1, [N, 4]), ``tiny_b`` and
``tiny_c`` (the same shape, other constants) and ``tiny3``: an ensemble
running ``tiny`` -> ``tiny_b`` -> ``tiny_c`` (Triton's layout: config.pbtxt
and an empty ``1/``). Without the ensemble a client needs three round trips.
One client (tritonclient HTTP, then gRPC; binary tensors, concurrency 1)
sends ``--requests`` requests to each, interleaved in ``--rounds`` rounds;
reported: the median of the rounds' p50 latencies and the ratio (goal:
ensemble <= 1.5x one tiny request).

Usage: ``.venv/bin/python bench/ensembles.py [--requests 300] [--rounds 3] [--modes inprocess,workers]``
(worker mode needs Redis, as ``bench/run.py --target serve-workers``).
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

from bench.targets import ServeTarget, WorkerServeTarget  # noqa: E402
from tests.support import onnx_models as m  # noqa: E402

ENSEMBLE = """name: "tiny3"
platform: "ensemble"
input [ { name: "X" data_type: TYPE_FP32 dims: [ -1, 4 ] } ]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ -1, 4 ] } ]
ensemble_scheduling { step [
  { model_name: "tiny" model_version: -1 input_map { key: "x" value: "X" } output_map { key: "y" value: "a" } },
  { model_name: "tiny_b" model_version: -1 input_map { key: "x" value: "a" } output_map { key: "y" value: "b" } },
  { model_name: "tiny_c" model_version: -1 input_map { key: "x" value: "b" } output_map { key: "y" value: "Y" } }
] }
"""


def build(root: Path) -> Path:
    """The tiny models and the ensemble of three of them."""
    for name, (scale, offset) in {"tiny": (2.0, 1.0), "tiny_b": (0.5, -1.0), "tiny_c": (3.0, 0.25)}.items():
        m.write_model(root, name, m.affine(scale, offset))
    (root / "tiny3" / "1").mkdir(parents=True)
    (root / "tiny3" / "config.pbtxt").write_text(ENSEMBLE)
    return root


def p50_ms(client, module, model: str, x: np.ndarray, requests: int) -> float:
    tensor = module.InferInput("x" if model == "tiny" else "X", list(x.shape), "FP32")
    tensor.set_data_from_numpy(x)
    times = []
    for _ in range(requests):
        started = time.perf_counter()
        client.infer(model, [tensor])
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--modes", default="inprocess", help="comma-separated: inprocess, workers")
    args = parser.parse_args()
    repository = build(Path(tempfile.mkdtemp(prefix="bench-ensembles-")))
    rows = []
    for mode in args.modes.split(","):
        kind = {"inprocess": ServeTarget, "workers": WorkerServeTarget}[mode]
        target = kind(repository, Path(tempfile.mkdtemp(prefix="bench-ensembles-var-")), name=f"ensembles-{mode}")
        if mode == "workers":  # ready once an ensemble request went through the worker
            body = b'{"inputs": [{"name": "X", "datatype": "FP32", "shape": [1, 4], "data": [0, 1, 2, 3]}]}'
            target.probe = ("/v2/models/tiny3/infer", body, {"Content-Type": "application/json"})
        rows += [(mode, *row) for row in measure(target, args.requests, args.rounds)]
    print(f"serve; tritonclient binary tensors, c=1; {args.rounds} rounds of {args.requests} requests\n")
    print("| mode | transport | one tiny request p50 ms | 3-step ensemble p50 ms | ratio (goal <= 1.5x) |")
    print("|---|---|---:|---:|---:|")
    for mode, transport, one, three in rows:
        print(f"| {mode} | {transport} | {one:.3f} | {three:.3f} | {three / one:.2f}x |")


def measure(target, requests: int, rounds: int) -> list[tuple[str, float, float]]:
    """(transport, p50 of one tiny request, p50 of the ensemble) per transport, on a started-here ``target``."""
    import tritonclient.grpc as grpcclient
    import tritonclient.http as httpclient

    target.start(timeout=300)
    x = np.arange(4, dtype=np.float32).reshape(1, 4)
    rows = []
    try:
        for transport, module, url in (
            ("HTTP", httpclient, target.base_url.removeprefix("http://")),
            ("gRPC", grpcclient, f"127.0.0.1:{target.grpc_port}"),
        ):
            client = module.InferenceServerClient(url)
            check = client.infer("tiny3", [_input(module, "X", x)]).as_numpy("Y")
            np.testing.assert_allclose(check, ((x * 2 + 1) * 0.5 - 1) * 3 + 0.25, rtol=1e-6)  # the chain, by hand
            medians = {"tiny": [], "tiny3": []}
            for model in medians:  # warm: sessions loaded
                p50_ms(client, module, model, x, 20)
            for _ in range(rounds):
                for model in medians:
                    medians[model].append(p50_ms(client, module, model, x, requests))
            rows.append((transport, statistics.median(medians["tiny"]), statistics.median(medians["tiny3"])))
            client.close()
    finally:
        target.stop()
    return rows


def _input(module, name: str, x: np.ndarray):
    tensor = module.InferInput(name, list(x.shape), "FP32")
    tensor.set_data_from_numpy(x)
    return tensor


if __name__ == "__main__":
    main()
