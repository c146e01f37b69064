"""What payload logging adds to a request's latency (not a timed test).

Starts one ``serve`` (in process, tests/support/server.py) with
``PAYLOAD_LOG_SINK`` set to a file, on two copies of the bench's tiny model
(FP32 [1, 16], y = 2x + 1): ``tiny_plain`` without payload logging and
``tiny_logged`` logging a share ``--rate`` of its requests (default 1.0,
every request: the worst case). Then it sends V2
JSON requests over one keep-alive connection (concurrency 1), alternating
blocks of ``--requests`` between the two models for ``--rounds`` rounds, and
prints the p50 of each block, the medians over rounds and their ratio.

    .venv/bin/python bench/payload_logging.py [--requests 3000] [--rounds 5] [--rate 0.1]
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

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.models import build_tiny  # noqa: E402
from tests.support.live import people_with_tokens, request  # noqa: E402
from tests.support.server import LiveServer  # noqa: E402


def p50_us(server: LiveServer, model: str, body: bytes, count: int) -> float:
    host, port = server.http_url.split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    latencies = []
    try:
        for _ in range(count):
            started = time.perf_counter()
            conn.request("POST", f"/v2/models/{model}/infer", body=body, headers={"Content-Type": "application/json"})
            response = conn.getresponse()
            response.read()
            latencies.append(time.perf_counter() - started)
            assert response.status == 200, response.status
    finally:
        conn.close()
    return statistics.median(latencies) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--rate", type=float, default=1.0, help="payload_log_rate of tiny_logged (default 1.0)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="payload-bench-") as work:
        work = Path(work)
        repository = work / "repository"
        for name in ("tiny_plain", "tiny_logged"):
            (repository / name / "1").mkdir(parents=True)
            (repository / name / "1" / "model.onnx").write_bytes(build_tiny())
        sink = work / "pairs.jsonl"
        server = LiveServer(repository, work / "var", extra_env={"PAYLOAD_LOG_SINK": str(sink)})
        server.start()
        try:
            token = people_with_tokens(server, bench_ops="superuser")["bench_ops"]
            status, answer = request(
                server, "PATCH", "/api/models/tiny_logged/", json.dumps({"payload_log_rate": args.rate}).encode(),
                {"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
            )  # fmt: skip
            assert status == 200 and answer["payload_log_rate"] == args.rate, answer
            body = json.dumps(
                {"inputs": [{"name": "x", "shape": [1, 16], "datatype": "FP32", "data": [0.5] * 16}]}
            ).encode()
            for model in ("tiny_plain", "tiny_logged"):  # warm-up: every HTTP process loads both
                p50_us(server, model, body, 500)
            results: dict[str, list[float]] = {"tiny_plain": [], "tiny_logged": []}
            for round_ in range(args.rounds):
                order = ("tiny_plain", "tiny_logged") if round_ % 2 == 0 else ("tiny_logged", "tiny_plain")
                for model in order:
                    results[model].append(p50_us(server, model, body, args.requests))
                print(
                    f"round {round_ + 1}: p50 plain {results['tiny_plain'][-1]:.1f} us, "
                    f"logged {results['tiny_logged'][-1]:.1f} us"
                )
            plain, logged = (statistics.median(results[m]) for m in ("tiny_plain", "tiny_logged"))
            time.sleep(1.0)
            lines = sum(1 for _ in sink.open()) if sink.exists() else 0
            print(f"median p50: plain {plain:.1f} us, logged {logged:.1f} us, ratio {logged / plain:.3f}")
            print(f"pairs written: {lines} of {500 + args.rounds * args.requests} requests (rate {args.rate})")
        finally:
            server.stop()


if __name__ == "__main__":
    main()
