"""The session memory budget in RSS at working sets of 1.5x, 2x and 4x it (issues 26 and 39).

Builds N models of S MiB each (``y = x @ W``, W random FP32, distinct per
model) in a Triton repository and, for each working set W x B (W in
``--sets``, B = ``SESSION_MEMORY_BUDGET_MB``; N = W x B / S models), starts
a fresh ``manage.py serve`` with one HTTP and one gRPC process (they share
B) and sends R rounds of one request to each model in turn (cyclic access:
the worst case of least-recently-used eviction), the even-numbered models
over REST and the odd ones over gRPC, so that each serving process sees
half the working set against half the budget. Reports, from the server's
``/metrics`` and ``/proc`` (summed over the server's process tree):

- the fixed overhead: RSS with no session loaded (2 s after ready);
- RSS above that overhead, at its peak (sampled every 50 ms) and at the end
  (after the last round and 2 s more), against the budget;
- the bytes charged at the end (``modelhost_session_memory_charged_bytes``);
- hit rate: requests that found their version loaded (1 - the requests that
  waited for a load / requests), after the first round (whose requests all load);
- request latency p50 (client side) over all requests, over the hits and
  over the misses after the first round (a miss waits for a load).

With ``--baseline DIR`` (a checkout of an earlier commit with its own
``manage.py``; e.g. ``git worktree add /tmp/before <commit>``), the same
runs against it, interleaved with this commit's (baseline, then this
commit, at each working set).

With ``--latency``, also what the allocator settings cost a request: the
p50 of ``session.run`` (a fresh input array each time, as a decoded request)
on bench/models.py's tiny and CNN models in a fresh process per setting,
interleaved ``--repeats`` times: glibc's defaults, the heaps bounded as under
a budget (:func:`inference.runtime.residency.bound_heaps`), those with
glibc's huge pages tunable (as ``serve`` runs them:
:func:`~inference.runtime.residency.allocator_environment`), and ONNX
Runtime's CPU arena off (``enable_cpu_mem_arena=False``, for comparison);
and a load (session creation) of the budget runs' models, cyclic with three
kept loaded, with glibc's defaults and with the heaps bounded and trimmed
(with and without huge pages).

Usage: ``.venv/bin/python bench/budget.py [--mib 20] [--budget-mb 240]
[--sets 1.5,2,4] [--rounds 6] [--baseline DIR] [--latency]``; prints
Markdown tables.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.targets import ServeTarget  # noqa: E402
from tests.support import onnx_models  # noqa: E402
from tests.support.rss import process_tree, status_kib  # noqa: E402


def write_models(root: Path, count: int, mib: float) -> int:
    """``count`` models ``wide<i>`` of about ``mib`` MiB; returns the square weight's side."""
    side = int((mib * 2**20 / 4) ** 0.5)
    for i in range(count):
        folder = root / f"wide{i}" / "1"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "model.onnx").write_bytes(onnx_models.matmul(side, seed=i))
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


def _rss_sampler(pid: int):
    """(samples list, stop event, thread): the summed RSS of ``pid``'s tree every 50 ms."""
    samples: list[float] = []
    stop = threading.Event()

    def sample():
        while not stop.is_set():
            samples.append(rss_mib(pid))
            time.sleep(0.05)

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    return samples, stop, thread


def run(label: str, repository: Path, work: Path, args, side: int, models: int, root: Path = ROOT) -> dict:
    import tritonclient.grpc as grpcclient
    import tritonclient.http as httpclient

    target = ServeTarget(
        repository, work, name=f"{label.split()[0]}-{models}", root=root, workers=args.workers,
        extra_env={"SESSION_MEMORY_BUDGET_MB": str(args.budget_mb), "GRPC_PROCESSES": str(args.grpc_processes)},
    )  # fmt: skip
    target.start(timeout=300)
    try:
        time.sleep(2)
        idle = rss_mib(target.process.pid)
        samples, stop, sampler = _rss_sampler(target.process.pid)
        rest = httpclient.InferenceServerClient(target.base_url.removeprefix("http://"))
        grpc = grpcclient.InferenceServerClient(target.grpc_address)
        x = np.ones((1, side), dtype=np.float32)
        latencies, hits, misses = [], [], []
        first_round_waits = None
        for round_ in range(args.rounds):
            if round_ == 1:
                first_round_waits = _waits(target)
            for i in range(models):
                waits = _waits(target) if round_ else 0.0
                started = time.perf_counter()
                if i % 2 == 0:
                    inp = httpclient.InferInput("x", [1, side], "FP32")
                    inp.set_data_from_numpy(x, binary_data=True)
                    out = httpclient.InferRequestedOutput("y", binary_data=True)
                    rest.infer(f"wide{i}", [inp], outputs=[out])
                else:
                    inp = grpcclient.InferInput("x", [1, side], "FP32")
                    inp.set_data_from_numpy(x)
                    grpc.infer(f"wide{i}", [inp], outputs=[grpcclient.InferRequestedOutput("y")])
                latencies.append((time.perf_counter() - started) * 1000)
                if round_:
                    (hits if _waits(target) == waits else misses).append(latencies[-1])
        time.sleep(2)
        stop.set()
        sampler.join()
        end = rss_mib(target.process.pid)
        text = urllib.request.urlopen(target.base_url + "/metrics", timeout=10).read().decode()
        requests = args.rounds * models
        waits = metric(text, "modelhost_model_load_wait_seconds_count")
        loads = metric(text, "modelhost_model_load_duration_seconds_count")
        transient = metric(text, "modelhost_model_load_wait_seconds_count", kind="transient")
        charged = metric(text, "modelhost_session_memory_charged_bytes") / 2**20
        if not waits:  # an older server without the wait metric: every load was a request that waited
            waits = loads
        later = requests - models
        latencies.sort()
        peak = max([end, *samples])
        return {
            "working set": f"{models * args.mib / args.budget_mb:.1f}x ({models} models)",
            "server": label,
            "hit rate after round 1": f"{1 - (waits - first_round_waits) / later:.0%}" if later else "-",
            "loads": f"{loads:.0f}" + (f" ({transient:.0f} transient)" if transient else ""),
            "charged MiB (end)": f"{charged:.0f}" if charged else "-",
            "fixed overhead MiB (idle RSS)": f"{idle:.0f}",
            "RSS - idle, peak MiB": f"{peak - idle:.0f}",
            "RSS - idle, end MiB": f"{end - idle:.0f}",
            "peak / budget": f"{(peak - idle) / args.budget_mb:.2f}",
            "end / budget": f"{(end - idle) / args.budget_mb:.2f}",
            "p50 ms": f"{statistics.median(latencies):.1f}",
            "p50 hit ms": f"{statistics.median(hits):.2f}" if hits else "-",
            "p50 miss ms": f"{statistics.median(misses):.1f}" if misses else "-",
        }
    finally:
        target.stop()


_LATENCY_CHILD = """
import sys, time, numpy as np, onnxruntime as ort
sys.path.insert(0, {root!r})
from inference.runtime import residency
setting, path, name, shape, runs = sys.argv[1], sys.argv[2], sys.argv[3], eval(sys.argv[4]), int(sys.argv[5])
if setting.startswith("bounded heaps"):
    assert residency.bound_heaps()
options = ort.SessionOptions()
options.intra_op_num_threads = options.inter_op_num_threads = 1
options.enable_cpu_mem_arena = setting != "no CPU arena"
session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
source = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
times = []
for i in range(runs + 50):
    started = time.perf_counter()
    x = np.frombuffer(bytearray(source.tobytes()), dtype=np.float32).reshape(shape)  # a request's decoded input
    session.run(None, {{name: x}})
    if i >= 50:
        times.append(time.perf_counter() - started)
times.sort()
print(times[len(times) // 2] * 1e3)
"""

_LOAD_CHILD = """
import sys, time, numpy as np, onnxruntime as ort
sys.path.insert(0, {root!r})
from inference.runtime import residency
setting, paths = sys.argv[1], sys.argv[2:]
bounded = setting.startswith("bounded heaps")
if bounded:
    assert residency.bound_heaps()
options = ort.SessionOptions()
options.intra_op_num_threads = options.inter_op_num_threads = 1
resident, times = [], []
for _ in range(3):
    for path in paths:  # cyclic, three kept loaded: each load follows an unload, as under a budget
        started = time.perf_counter()
        if bounded:
            residency.release_freed_memory()
        resident.append(ort.InferenceSession(path, options, providers=["CPUExecutionProvider"]))
        if bounded:
            residency.release_freed_memory()
        times.append(time.perf_counter() - started)
        del resident[:-3]
times.sort()
print(times[len(times) // 2] * 1e3)
"""

SETTINGS = ("glibc defaults", "bounded heaps", "bounded heaps + huge pages", "no CPU arena")


def _child_env(setting: str) -> dict:
    from inference.runtime import residency

    env = {k: v for k, v in os.environ.items() if k != "GLIBC_TUNABLES"}
    return env | ({"GLIBC_TUNABLES": residency.HUGE_PAGES_TUNABLE} if "huge pages" in setting else {})


def latency(work: Path, repeats: int) -> list[dict]:
    """p50 ms of session.run per model and allocator setting (module doc, ``--latency``)."""
    import subprocess

    from bench.models import MODELS, model_path, write_repository

    models = [MODELS["tiny"], MODELS["cnn"]]
    root = write_repository(work / "latency", models)
    code = _LATENCY_CHILD.format(root=str(ROOT))
    rows = []
    for model in models:
        tensor = model.inputs[0]
        runs = 3000 if model.name == "tiny" else 300
        medians: dict[str, list[float]] = {setting: [] for setting in SETTINGS}
        for _ in range(repeats):
            for setting in SETTINGS:
                out = subprocess.run(
                    [sys.executable, "-c", code, setting, str(model_path(root, model)), tensor.name,
                     repr(tuple(tensor.shape)), str(runs)],
                    capture_output=True, text=True, check=True, timeout=600, env=_child_env(setting),
                )  # fmt: skip
                medians[setting].append(float(out.stdout.strip().splitlines()[-1]))
        base = statistics.median(medians[SETTINGS[0]])
        row = {"model": model.name}
        for setting in SETTINGS:
            value = statistics.median(medians[setting])
            spread = f" [{min(medians[setting]):.3f}-{max(medians[setting]):.3f}]"
            ratio = "" if setting == SETTINGS[0] else f" ({value / base:.2f}x)"
            row[f"{setting} p50 ms [range]"] = f"{value:.3f}{ratio}{spread}"
        rows.append(row)
    paths = [str(path) for path in sorted((work / "repository").glob("wide*/1/model.onnx"))[:8]]
    loads: dict[str, list[float]] = {setting: [] for setting in SETTINGS[:3]}
    for _ in range(repeats):
        for setting in loads:
            out = subprocess.run(
                [sys.executable, "-c", _LOAD_CHILD.format(root=str(ROOT)), setting, *paths],
                capture_output=True, text=True, check=True, timeout=600, env=_child_env(setting),
            )  # fmt: skip
            loads[setting].append(float(out.stdout.strip().splitlines()[-1]))
    base = statistics.median(loads[SETTINGS[0]])
    row = {"model": f"a load of one of {len(paths)} models of the budget runs, cyclic"}
    for setting in SETTINGS:
        if setting not in loads:
            row[f"{setting} p50 ms [range]"] = "-"
            continue
        value = statistics.median(loads[setting])
        ratio = "" if setting == SETTINGS[0] else f" ({value / base:.2f}x)"
        row[f"{setting} p50 ms [range]"] = f"{value:.1f}{ratio} [{min(loads[setting]):.1f}-{max(loads[setting]):.1f}]"
    rows.append(row)
    return rows


def _table(rows: list[dict]) -> None:
    keys = list(rows[0])
    print("| " + " | ".join(keys) + " |\n|" + "---|" * len(keys))
    for row in rows:
        print("| " + " | ".join(row[k] for k in keys) + " |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mib", type=float, default=20.0, help="each model's size")
    parser.add_argument("--budget-mb", type=int, default=240)
    parser.add_argument("--sets", default="1.5,2,4", help="working sets, in budgets")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--baseline", type=Path, default=None)
    parser.add_argument("--workers", type=int, default=1, help="HTTP processes")
    parser.add_argument("--grpc-processes", type=int, default=1)
    parser.add_argument("--latency", action="store_true", help="also the allocator settings' cost per request")
    parser.add_argument("--repeats", type=int, default=3, help="interleaved repeats of --latency")
    args = parser.parse_args()
    sets = [float(s) for s in args.sets.split(",")]
    counts = [max(2, round(w * args.budget_mb / args.mib)) for w in sets]
    work = Path(tempfile.mkdtemp(prefix="bench-budget-"))
    side = write_models(work / "repository", max(counts), args.mib)
    rows = []
    for count in counts:
        repository = work / f"repository-{count}"  # the first ``count`` models
        repository.mkdir()
        for i in range(count):
            (repository / f"wide{i}").symlink_to(work / "repository" / f"wide{i}")
        if args.baseline:
            rows.append(run("baseline", repository, work, args, side, count, args.baseline.resolve()))
        rows.append(run("this commit", repository, work, args, side, count))
    print(
        f"models of {args.mib:g} MiB (MatMul {side}x{side}), SESSION_MEMORY_BUDGET_MB={args.budget_mb} shared by "
        f"{args.workers} HTTP + {args.grpc_processes} gRPC processes, {args.rounds} rounds of cyclic access "
        "(even models over REST, odd over gRPC)\n"
    )
    _table(rows)
    if args.latency:
        print(f"\nsession.run p50, median of {args.repeats} interleaved processes per setting\n")
        _table(latency(work, args.repeats))


if __name__ == "__main__":
    main()
