"""One team's flood against another team's steady traffic (issue 34, "One team
cannot hurt another").

A ``manage.py serve`` with tokens required (in process; with ``--modes
inprocess,workers`` also in worker mode: one CPU worker reached over mutual
TLS), two teams with a token each. Team B calls its own model at a steady
paced rate over REST (binary tensors) and gRPC, about a third of what the
server can do, for the whole run. Team A floods, from processes of its own,
at ten times the capacity and more, for ``--flood`` seconds in the middle:

- ``grpc``: ``--burst`` (400) gRPC calls in flight to A's model, each sent again as soon as it is answered;
- ``rest``: 32 REST connections doing the same;
- ``seq``: sequence STARTs (never ended) with 100 in flight to a sequence model;
- ``ensemble``: a 300-step ensemble with 20 in flight.

Reported per mode: B's p50/p99 and errors alone (before the flood), during
the flood and after it; A's answers by status (and whether its REST 429s
carried Retry-After); and the recovery time: from the end of the flood until
B's latencies stay within 2x its p99 alone. Goals (issue 34): B 0 errors,
B's p99 during the flood <= 2x alone, A throttled with Retry-After,
recovery <= 1 s.

Usage: ``.venv/bin/python bench/noisy_neighbour.py [--modes inprocess,workers]
[--floods grpc,rest,seq,ensemble] [--alone 8] [--flood 10] [--after 6] [--rounds 3]
[--rate 100] [--env ENSEMBLE_MAX_STEPS=300]`` (the 300-step chain needs the step limit raised)
(worker mode needs Redis at REDIS_URL, default 127.0.0.1:6379 database 11).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

WIDTH = 256
A_LOOPS = 100  # about 2 ms per inference here (slow_loop: ~20 us per iteration)
B_LOOPS = 50
STEPS = 300


def build(root: Path) -> tuple[Path, Path]:
    """Team A's repository (its model, a sequence model, a 300-step chain) and team B's (its model)."""
    from tests.support import onnx_models as m

    m.write_model(root / "b", "b_model", m.slow_loop(WIDTH))
    root = root / "a"
    m.write_model(root, "a_model", m.slow_loop(WIDTH))
    m.write_model(root, "a_unit", m.affine(1.0, 0.5))
    m.write_model(root, "a_seq", m.sequence_simple(), config=m.sequence_config("a_seq"))
    steps = []
    for i in range(STEPS):
        source = "X" if i == 0 else f"t{i}"
        sink = "Y" if i == STEPS - 1 else f"t{i + 1}"
        steps.append(
            f'{{ model_name: "a_unit" model_version: -1 input_map {{ key: "x" value: "{source}" }} '
            f'output_map {{ key: "y" value: "{sink}" }} }}'
        )
    (root / "a_chain" / "1").mkdir(parents=True)
    (root / "a_chain" / "config.pbtxt").write_text(
        'name: "a_chain"\nplatform: "ensemble"\n'
        'input [ { name: "X" data_type: TYPE_FP32 dims: [ -1, 4 ] } ]\n'
        'output [ { name: "Y" data_type: TYPE_FP32 dims: [ -1, 4 ] } ]\n'
        f"ensemble_scheduling {{ step [ {', '.join(steps)} ] }}\n"
    )
    return root, root.parent / "b"


# -- team A: the flood (a process per kind) ------------------------------------------
def flood(kind: str, url_http: str, url_grpc: str, token: str, seconds: float, burst: int, out: str) -> None:
    counts: dict[str, int] = {}
    retry_after = {"with": 0, "without": 0}
    lock = threading.Lock()

    def count(status: str) -> None:
        with lock:
            counts[status] = counts.get(status, 0) + 1

    until = time.monotonic() + seconds
    headers = {"authorization": f"Bearer {token}"}
    if kind == "rest":
        import http.client

        body = json.dumps(
            {
                "inputs": [
                    {"name": "x", "shape": [1, WIDTH], "datatype": "FP32", "data": [0.1] * WIDTH},
                    {"name": "n", "shape": [], "datatype": "INT64", "data": [A_LOOPS]},
                ]
            }
        ).encode()
        host, port = url_http.split(":")

        def loop() -> None:
            conn = http.client.HTTPConnection(host, int(port), timeout=60)
            while time.monotonic() < until:
                try:
                    conn.request(
                        "POST", "/v2/models/a_model/infer", body,
                        {"Content-Type": "application/json", "Authorization": f"Bearer {token}"},
                    )  # fmt: skip
                    response = conn.getresponse()
                    response.read()
                    count(str(response.status))
                    if response.status == 429:
                        with lock:
                            retry_after["with" if response.getheader("Retry-After") else "without"] += 1
                except OSError as exc:
                    count(type(exc).__name__)
                    conn.close()
                    conn = http.client.HTTPConnection(host, int(port), timeout=60)

        threads = [threading.Thread(target=loop) for _ in range(32)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    else:
        import tritonclient.grpc.aio as aio
        from tritonclient.utils import InferenceServerException

        async def main() -> None:
            client = aio.InferenceServerClient(url_grpc)
            x = aio.InferInput("x", [1, WIDTH], "FP32")
            x.set_data_from_numpy(np.full((1, WIDTH), 0.1, np.float32))
            n = aio.InferInput("n", [], "INT64")
            n.set_data_from_numpy(np.array(A_LOOPS, np.int64))
            chain_x = aio.InferInput("X", [1, 4], "FP32")
            chain_x.set_data_from_numpy(np.ones((1, 4), np.float32))
            seq_input = aio.InferInput("INPUT", [1, 1], "INT32")  # the server supplies START and READY
            seq_input.set_data_from_numpy(np.ones((1, 1), np.int32))
            seq_inputs = [seq_input]

            async def one() -> None:
                while time.monotonic() < until:
                    try:
                        if kind == "grpc":
                            await client.infer("a_model", [x, n], headers=headers)
                        elif kind == "ensemble":
                            await client.infer("a_chain", [chain_x], headers=headers)
                        else:  # seq: a new sequence each time, never ended
                            await client.infer(
                                "a_seq", seq_inputs, headers=headers, sequence_id=uuid.uuid4().int >> 65,
                                sequence_start=True,
                            )  # fmt: skip
                        count("OK")
                    except InferenceServerException as exc:
                        count(str(exc.status()).replace("StatusCode.", ""))

            await asyncio.gather(*(one() for _ in range(burst)))
            await client.close()

        asyncio.run(main())
    Path(out).write_text(json.dumps({"counts": counts, "retry_after": retry_after}))


# -- team B: steady traffic ------------------------------------------------------------
def steady(url_http: str, url_grpc: str, token: str, seconds: float, rate: float, out: str) -> None:
    """REST (binary) and gRPC at ``rate`` requests per second each, paced
    (a late request is sent at once, not skipped); (start, transport,
    latency ms, status) per request."""
    import tritonclient.grpc as grpcclient
    import tritonclient.http as httpclient
    from tritonclient.utils import InferenceServerException

    x = np.random.default_rng(1).standard_normal((1, WIDTH)).astype(np.float32)
    records: list[tuple] = []
    lock = threading.Lock()
    started = time.monotonic()
    headers = {"authorization": f"Bearer {token}"}

    def run(transport: str) -> None:
        module = httpclient if transport == "rest" else grpcclient
        client = (
            httpclient.InferenceServerClient(url_http, network_timeout=60)
            if transport == "rest"
            else grpcclient.InferenceServerClient(url_grpc)
        )
        tx = module.InferInput("x", [1, WIDTH], "FP32")
        tx.set_data_from_numpy(x)
        tn = module.InferInput("n", [], "INT64")
        tn.set_data_from_numpy(np.array(B_LOOPS, np.int64))
        expected = None
        i = 0
        while True:
            due = started + i / rate
            now = time.monotonic()
            if due - started > seconds:
                break
            if due > now:
                time.sleep(due - now)
            t0 = time.monotonic()
            try:
                result = client.infer("b_model", [tx, tn], headers=dict(headers))  # the HTTP client adds to it
                y = result.as_numpy("y")
                if expected is None:
                    expected = y
                status = "OK" if np.allclose(y, expected) else "WRONG"
            except InferenceServerException as exc:
                status = str(exc.status())
            with lock:
                records.append((t0 - started, transport, (time.monotonic() - t0) * 1e3, status))
            i += 1

    threads = [threading.Thread(target=run, args=(t,)) for t in ("rest", "grpc")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    Path(out).write_text(json.dumps(records))


# -- the run ---------------------------------------------------------------------------
def summary(records: list, lo: float, hi: float) -> dict:
    rows = [r for r in records if lo <= r[0] < hi]
    ok = sorted(r[2] for r in rows if r[3] == "OK")
    errors: dict[str, int] = {}
    for r in rows:
        if r[3] != "OK":
            errors[r[3]] = errors.get(r[3], 0) + 1
    q = statistics.quantiles(ok, n=100) if len(ok) >= 2 else [float("nan")] * 99
    return {"n": len(rows), "p50": statistics.median(ok) if ok else float("nan"), "p99": q[98], "errors": errors}


def recovery(records: list, flood_end: float, limit_ms: float) -> float:
    """Seconds from the end of the flood until every later B request is OK and within ``limit_ms``."""
    last_bad = flood_end
    for start, _t, ms, status in records:
        if start >= flood_end - 1e-9 and (status != "OK" or ms > limit_ms):
            last_bad = max(last_bad, start + ms / 1e3)
    return last_bad - flood_end


def run_mode(mode: str, args, repositories: tuple[Path, Path]) -> list[dict]:
    from tests.support.live import manage, people_with_tokens
    from tests.support.server import serve_live

    var = Path(tempfile.mkdtemp(prefix=f"bench-noisy-{mode}-"))
    env = {"INFERENCE_REQUIRE_TOKEN": "true", "REQUEST_LOG_LEVEL": "WARNING", "LOG_LEVEL": "WARNING"}
    env.update(item.split("=", 1) for item in args.env)
    empty = Path(tempfile.mkdtemp(prefix="bench-noisy-empty-"))
    lifetime = serve_live(empty, var, env, args.redis if mode == "workers" else None)
    server = next(lifetime)  # in worker mode: one CPU worker over mutual TLS, its heartbeat seen
    rows = []
    try:
        tokens = people_with_tokens(server, alice="team_a", bob="team_b")
        for repository, team in zip(repositories, ("team_a", "team_b")):  # each team owns its models
            manage(server, "import_repository", str(repository), "--team", team)
        time.sleep(3)  # every process has seen the new models (registry poll)
        for kind in [k for _ in range(args.rounds) for k in args.floods.split(",")]:  # rounds interleaved
            work = Path(tempfile.mkdtemp(prefix="bench-noisy-out-"))
            total = args.alone + args.flood + args.after
            b = subprocess.Popen(
                [sys.executable, __file__, "--role", "steady", server.http_url, server.grpc_url, tokens["bob"],
                 str(total), str(args.rate), str(work / "b.json")], cwd=ROOT,
            )  # fmt: skip
            time.sleep(args.alone)
            burst = {"grpc": args.burst, "rest": 32, "seq": 100, "ensemble": 20}[kind]
            a = subprocess.Popen(
                [sys.executable, __file__, "--role", "flood", kind, server.http_url, server.grpc_url,
                 tokens["alice"], str(args.flood), str(burst), str(work / "a.json")], cwd=ROOT,
            )  # fmt: skip
            a.wait()
            b.wait()
            records = json.loads((work / "b.json").read_text())
            flooded = json.loads((work / "a.json").read_text())
            flood_start, flood_end = args.alone, args.alone + args.flood
            alone = summary(records, 1.0, flood_start)
            during = summary(records, flood_start, flood_end)
            after = summary(records, flood_end, total)
            row = {
                "mode": mode, "flood": kind, "alone": alone, "during": during, "after": after,
                "a": flooded, "recovery_s": recovery(records, flood_end, 2 * alone["p99"]),
            }  # fmt: skip
            rows.append(row)
            print(json.dumps(row), flush=True)
            time.sleep(2)
    finally:
        next(lifetime, None)  # stops the server
    return rows


def aggregate(rows: list[dict]) -> list[dict]:
    """One row per (mode, flood) over the rounds: medians of the latencies,
    the p99 ratio and the recovery; errors and A's answers summed."""
    cells: dict[tuple, list[dict]] = {}
    for row in rows:
        cells.setdefault((row["mode"], row["flood"]), []).append(row)
    out = []
    for (mode, flood), runs in cells.items():
        counts: dict[str, int] = {}
        for r in runs:
            for k, v in r["a"]["counts"].items():
                counts[k] = counts.get(k, 0) + v
        out.append({
            "mode": mode, "flood": flood, "rounds": len(runs),
            "alone": {q: statistics.median(r["alone"][q] for r in runs) for q in ("p50", "p99")},
            "during": {q: statistics.median(r["during"][q] for r in runs) for q in ("p50", "p99")},
            "ratio": statistics.median(r["during"]["p99"] / r["alone"]["p99"] for r in runs),
            "errors": sum(sum(r["during"]["errors"].values()) for r in runs),
            "errors_after": sum(sum(r["after"]["errors"].values()) for r in runs),
            "a": counts,
            "retry_after": {w: sum(r["a"]["retry_after"][w] for r in runs) for w in ("with", "without")},
            "recovery_s": statistics.median(r["recovery_s"] for r in runs),
        })  # fmt: skip
    return out


def table(rows: list[dict]) -> str:
    """Markdown table of :func:`aggregate`'s rows."""
    lines = [
        "| mode | A's flood | rounds | B alone p50 / p99 ms | B during p50 / p99 ms | p99 ratio "
        "| B errors during (after) | A's answers | recovery s |",
        "|---|---|---:|---|---|---:|---|---|---:|",
    ]
    for r in rows:
        a, d = r["alone"], r["during"]
        answers = ", ".join(f"{k} {v}" for k, v in sorted(r["a"].items()))
        ra = r["retry_after"]
        if ra["with"] or ra["without"]:
            answers += f" (Retry-After on {ra['with']} of {ra['with'] + ra['without']} REST 429s)"
        lines.append(
            f"| {r['mode']} | {r['flood']} | {r['rounds']} | {a['p50']:.2f} / {a['p99']:.2f} | "
            f"{d['p50']:.2f} / {d['p99']:.2f} | {r['ratio']:.2f}x | {r['errors']} ({r['errors_after']}) | {answers} | "
            f"{r['recovery_s']:.2f} |"
        )
    return "\n".join(lines)


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--role":
        role, rest = sys.argv[2], sys.argv[3:]
        if role == "flood":
            kind, http_url, grpc_url, token, seconds, burst, out = rest
            flood(kind, http_url, grpc_url, token, float(seconds), int(burst), out)
        else:
            http_url, grpc_url, token, seconds, rate, out = rest
            steady(http_url, grpc_url, token, float(seconds), float(rate), out)
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--modes", default="inprocess")
    parser.add_argument("--floods", default="grpc,rest,seq,ensemble")
    parser.add_argument("--alone", type=float, default=8.0)
    parser.add_argument("--flood", type=float, default=10.0)
    parser.add_argument("--after", type=float, default=6.0)
    parser.add_argument("--rounds", type=int, default=1, help="rounds of every flood, interleaved; medians reported")
    parser.add_argument("--rate", type=float, default=40.0, help="B's requests per second, per transport")
    parser.add_argument("--burst", type=int, default=400)
    parser.add_argument("--env", action="append", default=[], help="NAME=value for the server (repeatable)")
    parser.add_argument("--redis", default=os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/11"))
    args = parser.parse_args()
    repositories = build(Path(tempfile.mkdtemp(prefix="bench-noisy-repo-")))
    rows = []
    for mode in args.modes.split(","):
        rows += run_mode(mode, args, repositories)
    print()
    print(table(aggregate(rows)))


if __name__ == "__main__":
    main()
