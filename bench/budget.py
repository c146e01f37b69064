"""The session memory budget under a working set twice its size (issue 26, item 2).

Builds N models of S MiB each (``y = x @ W``, W random FP32, distinct per
model) in a Triton repository, starts ``manage.py serve`` in process with
``SESSION_MEMORY_BUDGET_MB`` = B (shared by its serving processes), and sends
R rounds of one request to each model in turn (cyclic access: the worst case
of least-recently-used eviction) over REST from one client. Reports, from
the server's ``/metrics`` and ``/proc``:

- hit rate: requests that found their version loaded (1 - the requests that
  waited for a load / requests), over the whole run and after the first
  round (whose requests all load);
- loads that were transient (a version run outside the budget);
- the server's RSS: idle with nothing loaded, the peak while the test ran
  (sum over its processes, sampled every 50 ms), and the peak above idle
  against the budget;
- request latency p50 / p99 (client side).

With ``--baseline DIR`` (a checkout of an earlier commit with its own
``manage.py``; e.g. ``git worktree add /tmp/before <commit>``), the same run
against it first, for the ratio.

Usage: ``.venv/bin/python bench/budget.py [--models 24] [--mib 10]
[--budget-mb 120] [--rounds 6] [--baseline DIR]``; prints a Markdown table.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.targets import ServeTarget  # noqa: E402
from tests.support.rss import process_tree, status_kib  # noqa: E402


def write_models(root: Path, count: int, mib: float) -> int:
    """``count`` models ``wide<i>`` of about ``mib`` MiB; returns the square weight's side."""
    side = int((mib * 2**20 / 4) ** 0.5)
    for i in range(count):
        weight = np.random.default_rng(i).standard_normal((side, side), dtype=np.float32)
        graph = helper.make_graph(
            [helper.make_node("MatMul", ["x", "w"], ["y"])],
            f"wide{i}",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [-1, side])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [-1, side])],
            [numpy_helper.from_array(weight, "w")],
        )
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        model.ir_version = 8
        folder = root / f"wide{i}" / "1"
        folder.mkdir(parents=True, exist_ok=True)
        onnx.save(model, folder / "model.onnx")
        (root / f"wide{i}" / "config.pbtxt").write_text("instance_group [ { kind: KIND_CPU count: 1 } ]\n")
    return side


def rss_mib(pid: int) -> float:
    return sum(status_kib(p, "VmRSS") for p in process_tree(pid)) / 1024


def metric(text: str, name: str, **labels: str) -> float:
    """Sum of a Prometheus sample ``name`` whose labels include ``labels``."""
    total = 0.0
    for line in text.splitlines():
        if not line.startswith(name):
            continue
        match = re.match(rf"{re.escape(name)}(\{{[^}}]*\}})? ([0-9.e+-]+)$", line)
        if match and all(f'{k}="{v}"' in (match.group(1) or "") for k, v in labels.items()):
            total += float(match.group(2))
    return total


def _waits(target) -> float:
    """Requests that waited for a load so far (loads, on a server without the wait metric)."""
    text = urllib.request.urlopen(target.base_url + "/metrics", timeout=10).read().decode()
    return metric(text, "modelhost_model_load_wait_seconds_count") or metric(
        text, "modelhost_model_load_duration_seconds_count"
    )


def run(label: str, repository: Path, work: Path, args, side: int, budget_mb: int, root: Path = ROOT) -> dict:
    import tritonclient.http as httpclient

    target = ServeTarget(
        repository, work, name=label, root=root,
        extra_env={"SESSION_MEMORY_BUDGET_MB": str(budget_mb)},
    )  # fmt: skip
    target.start(timeout=300)
    try:
        time.sleep(2)
        idle = rss_mib(target.process.pid)
        peak = [idle]
        stop = threading.Event()

        def sample():
            while not stop.is_set():
                peak.append(rss_mib(target.process.pid))
                time.sleep(0.05)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        client = httpclient.InferenceServerClient(target.base_url.removeprefix("http://"))
        x = np.ones((1, side), dtype=np.float32)
        latencies = []
        first_round_waits = None
        for round_ in range(args.rounds):
            if round_ == 1:
                first_round_waits = _waits(target)
            for i in range(args.models):
                inp = httpclient.InferInput("x", [1, side], "FP32")
                inp.set_data_from_numpy(x, binary_data=True)
                started = time.perf_counter()
                client.infer(f"wide{i}", [inp], outputs=[httpclient.InferRequestedOutput("y", binary_data=True)])
                latencies.append((time.perf_counter() - started) * 1000)
        stop.set()
        sampler.join()
        text = urllib.request.urlopen(target.base_url + "/metrics", timeout=10).read().decode()
        requests = args.rounds * args.models
        waits = metric(text, "modelhost_model_load_wait_seconds_count")
        loads = metric(text, "modelhost_model_load_duration_seconds_count")
        transient = metric(text, "modelhost_model_load_wait_seconds_count", kind="transient")
        charged = metric(text, "modelhost_session_memory_charged_bytes") / 2**20
        if not waits:  # an older server without the wait metric: every load was a request that waited
            waits = loads
        later = requests - args.models
        latencies.sort()
        return {
            "server": label,
            "hit rate": f"{1 - waits / requests:.0%}",
            "after the first round": f"{1 - (waits - first_round_waits) / later:.0%}" if later else "-",
            "loads": f"{loads:.0f}" + (f" ({transient:.0f} transient)" if transient else ""),
            "charged MiB (end)": f"{charged:.0f}" if charged else "-",
            "RSS idle MiB": f"{idle:.0f}",
            "RSS peak MiB": f"{max(peak):.0f}",
            "peak above idle / budget": f"{(max(peak) - idle) / args.budget_mb:.2f}",  # the machine's budget
            "p50 ms": f"{statistics.median(latencies):.1f}",
            "p99 ms": f"{latencies[int(len(latencies) * 0.99) - 1]:.1f}",
        }
    finally:
        target.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", type=int, default=24)
    parser.add_argument("--mib", type=float, default=10.0)
    parser.add_argument("--budget-mb", type=int, default=120)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--baseline", type=Path, default=None)
    parser.add_argument(
        "--processes", type=int, default=4, help="the server's serving processes (HTTP_WORKERS + GRPC_PROCESSES)"
    )
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-budget-"))
    repository = work / "repository"
    side = write_models(repository, args.models, args.mib)
    rows = []
    if args.baseline:
        # Before, each serving process had the whole budget: give it each one's share of today's.
        share = args.budget_mb // args.processes
        rows.append(run(f"baseline ({share} MB each)", repository, work, args, side, share, args.baseline.resolve()))
    rows.append(run("this commit", repository, work, args, side, args.budget_mb))
    print(
        f"{args.models} models of {args.mib:g} MiB (MatMul {side}x{side}), SESSION_MEMORY_BUDGET_MB={args.budget_mb}, "
        f"{args.rounds} rounds of cyclic access over REST\n"
    )
    keys = list(rows[0])
    print("| " + " | ".join(keys) + " |\n|" + "---|" * len(keys))
    for row in rows:
        print("| " + " | ".join(row[k] for k in keys) + " |")


if __name__ == "__main__":
    main()
