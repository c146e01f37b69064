"""What shadow traffic adds to the live answers' latency (not a timed test).

Starts one ``serve`` (in process by default; ``--workers-mode``: inference
in one CPU worker over Redis at 127.0.0.1:6379, database 12) with a model of
two versions: version 1 answers (version policy ``specific`` [1]), version 2
is the shadow. ``--model tiny``: the bench's tiny model (FP32 [1, 16], y =
2x + 1; version 2 y = 2x + 1.5); ``--model cnn``: the bench's CNN (FP32 [1,
3, 224, 224] -> [1, 10], ~54 M MACs; version 2 another seed), where the
copy's run competes for the CPU with the live requests.

Each round measures blocks of ``--requests`` live requests at concurrency 1
(V2 JSON over one keep-alive HTTP connection, and gRPC ``ModelInfer`` over
one channel; ``--think-ms``: a pause between a block's requests, an
idle-ish server; 0: each request sent as soon as the last is answered)
with shadow traffic off and at 100% (``PUT`` / ``DELETE
/api/models/<m>/shadow/``), the order alternating between rounds; it prints
each block's p50 and p99, then per transport the medians over rounds and
the ratios on/off, and what the shadow side counted over the run (warm-up
included) from the management API: the copies offered, and the shares
compared, dropped (queue full) and busy (no quiet spell: not run).

    .venv/bin/python bench/shadow.py [--model tiny|cnn] [--requests 2000] [--rounds 5] [--workers-mode]
                                     [--think-ms 0]
"""

from __future__ import annotations

import argparse
import http.client
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import grpc
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tritonclient.grpc import service_pb2 as pb  # noqa: E402  (tests.support.live uses these stubs too)

from bench.models import build_cnn, build_tiny  # noqa: E402
from tests.support import onnx_models as m  # noqa: E402
from tests.support.live import bearer, people_with_tokens, request, wait_for  # noqa: E402
from tests.support.server import LiveServer  # noqa: E402

MODEL = "shadowed"
#: model -> (version 1, version 2, input name, input shape)
MODELS = {
    "tiny": (build_tiny, lambda: m.affine(2.0, 1.5, width=16, batch=1), "x", (1, 16)),
    "cnn": (build_cnn, lambda: build_cnn(seed=8), "image", (1, 3, 224, 224)),
}


def _api(server, token, method: str, path: str, body=None) -> tuple[int, dict]:
    data = json.dumps(body).encode() if body is not None else b""
    return request(server, method, path, data, {**bearer(token), "Content-Type": "application/json"})


def rest_block(server, body: bytes, count: int, think: float = 0.0) -> list[float]:
    """Latencies (s) of ``count`` V2 JSON requests over one keep-alive connection, ``think`` s apart."""
    host, port = server.http_url.split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=60)
    out = []
    try:
        for _ in range(count):
            started = time.perf_counter()
            conn.request("POST", f"/v2/models/{MODEL}/infer", body=body, headers={"Content-Type": "application/json"})
            response = conn.getresponse()
            response.read()
            out.append(time.perf_counter() - started)
            assert response.status == 200, response.status
            if think:
                time.sleep(think)
    finally:
        conn.close()
    return out


def grpc_block(channel, message: bytes, count: int, think: float = 0.0) -> list[float]:
    """Latencies (s) of ``count`` gRPC ModelInfer calls over one channel, ``think`` s apart."""
    call = channel.unary_unary(
        "/inference.GRPCInferenceService/ModelInfer",
        request_serializer=lambda b: b,
        response_deserializer=pb.ModelInferResponse.FromString,
    )
    out = []
    for _ in range(count):
        started = time.perf_counter()
        answer = call(message, timeout=60)
        out.append(time.perf_counter() - started)
        assert answer.model_version == "1", answer.model_version
        if think:
            time.sleep(think)
    return out


def _p(latencies: list[float], q: float) -> float:
    return float(np.percentile(latencies, q)) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", choices=sorted(MODELS), default="tiny")
    parser.add_argument("--requests", type=int, default=2000, help="requests per block")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--workers-mode", action="store_true", help="inference in one CPU worker (needs Redis)")
    parser.add_argument("--think-ms", type=float, default=0.0, help="pause between a block's requests (ms)")
    args = parser.parse_args()
    first, second, input_name, shape = MODELS[args.model]
    think = args.think_ms / 1000
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    body = json.dumps(
        {"inputs": [{"name": input_name, "shape": list(shape), "datatype": "FP32", "data": x.ravel().tolist()}]}
    ).encode()
    message = pb.ModelInferRequest(model_name=MODEL)
    tensor = message.inputs.add(name=input_name, datatype="FP32")
    tensor.shape.extend(shape)
    message.raw_input_contents.append(x.tobytes())
    message = message.SerializeToString()
    with tempfile.TemporaryDirectory(prefix="shadow-bench-") as work:
        work = Path(work)
        repository = work / "repository"
        repository.mkdir()
        if args.workers_mode:
            from tests.support.server import serve_live

            live = serve_live(repository, work / "var", {}, "redis://127.0.0.1:6379/12")
            server = next(live)
        else:
            live = None
            server = LiveServer(repository, work / "var").start()
        try:
            token = people_with_tokens(server, bench_ops="bench")["bench_ops"]
            from tests.support.live import upload

            for payload in (first(), second()):
                status, answer = upload(server, token, MODEL, payload, "bench")
                assert status in (201, 202), answer

            def ready() -> bool:
                versions = _api(server, token, "GET", f"/api/models/{MODEL}/")[1].get("versions", [])
                return [v["state"] for v in versions] == ["READY", "READY"]

            assert wait_for(ready, timeout=120)
            policy = {"version_policy": "specific", "specific_versions": [1]}
            status, answer = _api(server, token, "PATCH", f"/api/models/{MODEL}/", policy)
            assert status == 200 and answer["default_version"] == 1, answer
            channel = grpc.insecure_channel(server.grpc_url)
            results = {(t, s): [] for t in ("rest", "grpc") for s in ("off", "on")}
            for setting in ("on", "off"):  # warm-up: every process loads both versions
                _shadow(server, token, setting)
                rest_block(server, body, 300)
                grpc_block(channel, message, 300)
            for round_ in range(args.rounds):
                order = ("off", "on") if round_ % 2 == 0 else ("on", "off")
                line = []
                for setting in order:
                    _shadow(server, token, setting)
                    for transport, block in (("rest", rest_block), ("grpc", grpc_block)):
                        target, payload = (server, body) if block is rest_block else (channel, message)
                        latencies = block(target, payload, args.requests, think)
                        results[(transport, setting)].append((_p(latencies, 50), _p(latencies, 99)))
                        line.append(f"{transport} {setting} p50 {_p(latencies, 50):.0f} p99 {_p(latencies, 99):.0f} us")
                print(f"round {round_ + 1}: " + "; ".join(line), flush=True)
            channel.close()
            print(f"\n{args.model}, {'worker mode' if args.workers_mode else 'in process'}, concurrency 1, "
                  f"{args.think_ms:g} ms between requests, {args.rounds} rounds x {args.requests} requests per "
                  "block; medians over rounds (us):")  # fmt: skip
            for transport in ("rest", "grpc"):
                off = [statistics.median(v[i] for v in results[(transport, "off")]) for i in (0, 1)]
                on = [statistics.median(v[i] for v in results[(transport, "on")]) for i in (0, 1)]
                print(
                    f"  {transport}: p50 off {off[0]:.0f}, on {on[0]:.0f} (ratio {on[0] / off[0]:.3f}); "
                    f"p99 off {off[1]:.0f}, on {on[1]:.0f} (ratio {on[1] / off[1]:.3f})"
                )
            _shadow(server, token, "on")
            time.sleep(12)  # every process writes its comparisons every CHART_FLUSH_SECONDS (10 s)
            report = _api(server, token, "GET", f"/api/models/{MODEL}/shadow/")[1]
            compared = max((o["compared"] for o in report["outputs"].values()), default=0)
            offered = report["requests"] + report["dropped"] + report["busy"]
            print(
                f"  shadow side (last hour): {offered} copies offered: {report['requests']} run, {compared} compared "
                f"({compared / max(1, offered):.0%}), {report['errors']} errors, {report['dropped']} dropped "
                f"(queue full, {report['dropped'] / max(1, offered):.0%}), {report['busy']} busy "
                f"({report['busy'] / max(1, offered):.0%})"
            )
        finally:
            if live is not None:
                next(live, None)
            else:
                server.stop()


def _shadow(server, token, setting: str) -> None:
    if setting == "on":
        status, answer = _api(server, token, "PUT", f"/api/models/{MODEL}/shadow/", {"version": 2, "percent": 100})
        assert status == 200, answer
    else:
        status, answer = _api(server, token, "DELETE", f"/api/models/{MODEL}/shadow/")
        assert status in (204, 404), answer
    time.sleep(0.2)


if __name__ == "__main__":
    main()
