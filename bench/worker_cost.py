"""What a request costs each process of the server, in process and in worker
mode: CPU time and context switches per request, by role (HTTP processes,
gRPC processes, the inference worker), read from /proc around each load.

    .venv/bin/python bench/worker_cost.py [--model cnn] [--seconds 5] [--rounds 3]
                                          [--transports rest-binary,grpc]

Servers: ``serve`` (ONNX Runtime in every front-end process) and
``serve-workers`` (one ``manage.py runworker --device cpu`` on the worker's
Unix socket, shared memory for large tensors), as ``bench/run.py`` starts
them; loads: wrk (REST) and h2load (gRPC) at concurrency 1 and 8, the
servers taking turns in each round. Per cell (medians over rounds): req/s;
CPU µs per request of each role (utime + stime of every process of the
server's sessions, /proc/<pid>/stat, 10 ms ticks) and context switches per
request (voluntary + involuntary, summed over every thread,
/proc/<pid>/task/*/status). The load generator's own CPU is not counted; it
shares the machine's cores with the servers.

Item 6 of issue 39 (worker mode ≥ 0.8x in process at c=1 and c=8): the
ratio of req/s at concurrency 8 follows the ratio of CPU per request, so
this shows where the extra CPU of worker mode goes (see bench/README.md).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import models as bench_models  # noqa: E402
from bench.loads import make_loaders  # noqa: E402
from bench.targets import ServeTarget, WorkerServeTarget  # noqa: E402
from bench.workloads import TRANSPORTS  # noqa: E402

WORK = ROOT / "bench" / "work"
ROLES = ("HTTP", "gRPC", "worker", "other")
_TICK_US = 1e6 / os.sysconf("SC_CLK_TCK")


def _stat_fields(pid: int) -> list[str]:
    with open(f"/proc/{pid}/stat") as file:
        return file.read().rsplit(")", 1)[1].split()


def session_pids(sessions: set[int]) -> list[int]:
    """Every process whose session is one of ``sessions``."""
    pids = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                if int(_stat_fields(int(name))[3]) in sessions:
                    pids.append(int(name))
            except (OSError, IndexError, ValueError):
                continue
    return pids


def role(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as file:
            command = file.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return "other"
    if "granian" in command:
        return "HTTP"
    if "rungrpc" in command:
        return "gRPC"
    if "runworker" in command:
        return "worker"
    return "other"


def role_pids(sessions: set[int], name: str) -> list[int]:
    """The processes of ``sessions`` whose :func:`role` is ``name``."""
    return [pid for pid in session_pids(sessions) if role(pid) == name]


def sample(pids: list[int]) -> dict[int, tuple[int, int, int]]:
    """(CPU ticks, context switches, minor page faults) of each process still there."""
    out = {}
    for pid in pids:
        try:
            fields = _stat_fields(pid)
            switches = 0
            for task in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{task}/status") as file:
                    for line in file:
                        if line.startswith(("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches")):
                            switches += int(line.split()[1])
            out[pid] = (int(fields[11]) + int(fields[12]), switches, int(fields[7]))
        except (OSError, ValueError):
            continue
    return out


def by_role(before: dict, after: dict, requests: int) -> dict[str, tuple[float, float, float]]:
    """CPU µs, context switches and minor page faults per request, summed by role."""
    totals = {r: [0.0, 0.0, 0.0] for r in ROLES}
    for pid, (ticks, switches, faults) in after.items():
        if pid in before:
            entry = totals[role(pid)]
            entry[0] += (ticks - before[pid][0]) * _TICK_US
            entry[1] += switches - before[pid][1]
            entry[2] += faults - before[pid][2]
    n = max(1, requests)
    return {r: (cpu / n, cs / n, pf / n) for r, (cpu, cs, pf) in totals.items()}


def prepare(model, transport_names: str, repository_name: str):
    """A repository of ``model`` under bench/work, the transports named
    (comma-separated), their requests (by transport name) and the loaders:
    (repository, transports, requests, loaders); None, said why, when a
    loader's program is missing."""
    repository = bench_models.write_repository(WORK / repository_name, [model])
    inputs = model.sample_inputs(repository)
    loaders = make_loaders(WORK)
    transports = [TRANSPORTS[name] for name in transport_names.split(",")]
    for transport in transports:
        missing = loaders[transport.loader].available()
        if missing:
            print(f"{transport.loader} is missing: {missing}")
            return None
    return repository, transports, {t.name: t.build_request(model, inputs) for t in transports}, loaders


def rest_probe(model, repository: Path, requests: dict) -> tuple[str, bytes, dict[str, str]]:
    """Worker mode's readiness probe (a REST binary inference, whatever the
    transports measured): the prepared request when there is one."""
    rest = requests.get("rest-binary") or TRANSPORTS["rest-binary"].build_request(
        model, model.sample_inputs(repository)
    )
    return rest.path, rest.body, rest.headers


def target_sessions(target) -> set[int]:
    """The sessions of a target's processes: its server's, and its worker's in worker mode."""
    worker = getattr(target, "worker", None)
    return {target.process.pid} | ({worker.pid} if worker is not None else set())


def stop_all(targets) -> None:
    """Stop every target, and its worker in worker mode."""
    for target in targets:
        target.stop()
        if getattr(target, "worker", None) is not None:
            target.terminate(target.worker)


def cells(rounds: int, transports, concurrencies, targets):
    """(round, transport, concurrency, target), interleaved: in each round,
    cell after cell, every target in turn on each."""
    for round_no in range(1, rounds + 1):
        for transport in transports:
            for concurrency in concurrencies:
                for target in targets:
                    yield round_no, transport, concurrency, target


def measure(loader, target, transport: str, request, concurrency: int, seconds: float, sessions: set[int]):
    """One cell: 1 s of warm-up (not counted), then ``seconds`` measured;
    (the LoadResult, :func:`by_role` of the processes of ``sessions``)."""
    url = target.url_for(transport)
    loader.run(url, request, concurrency, 1)
    pids = session_pids(sessions)
    before = sample(pids)
    load = loader.run(url, request, concurrency, seconds)
    costs = by_role(before, sample(pids), load.requests)
    if load.errors:
        print(f"{target.name} {transport} c{concurrency}: {load.errors} errors")
    return load, costs


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="cnn", choices=["tiny", "cnn"])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--transports", default="rest-binary,grpc")
    args = parser.parse_args(argv)
    model = bench_models.MODELS[args.model]
    prepared = prepare(model, args.transports, "worker-cost-repository")
    if prepared is None:
        return 2
    repository, transports, requests, loaders = prepared
    serve = ServeTarget(repository, WORK)
    workers = WorkerServeTarget(repository, WORK)
    workers.probe = rest_probe(model, repository, requests)
    targets = [serve, workers]
    results: dict[tuple, list] = {}
    try:
        for target in targets:
            target.start()
        for round_no, transport, concurrency, target in cells(args.rounds, transports, (1, 8), targets):
            load, costs = measure(loaders[transport.loader], target, transport.name, requests[transport.name],
                                  concurrency, args.seconds, target_sessions(target))  # fmt: skip
            results.setdefault((transport.name, concurrency, target.name), []).append((load.rps, costs))
            cpu = sum(c[0] for c in costs.values())
            print(f"round {round_no} {target.name:14} {transport.name:12} c{concurrency}  "
                  f"{load.rps:8,.0f} req/s  {cpu:6.0f} us CPU/request", flush=True)  # fmt: skip
    finally:
        stop_all(targets)
    print_table(results, args)
    return 0


def print_table(results: dict, args) -> None:
    print(f"\nModel {args.model}; medians of {args.rounds} rounds of {args.seconds:.0f} s; CPU in µs per request, "
          "context switches (cs) and minor page faults per request.\n")  # fmt: skip
    head = " | ".join(f"{r} CPU | {r} cs | {r} faults" for r in ROLES[:3])
    print(f"| transport | c | server | req/s | ratio | {head} | CPU total | cs total |")
    print("|" + "---|" * (5 + 3 * 3 + 2))
    for (transport, concurrency, name), rows in results.items():
        rate = statistics.median(r for r, _ in rows)
        base = statistics.median(r for r, _ in results[(transport, concurrency, "serve")])
        cells = []
        for r in ROLES[:3]:
            cpu = statistics.median(c[r][0] for _, c in rows)
            cs = statistics.median(c[r][1] for _, c in rows)
            faults = statistics.median(c[r][2] for _, c in rows)
            cells.append(f"{cpu:,.0f} | {cs:.1f} | {faults:,.0f}" if cpu or cs else "- | - | -")
        total = statistics.median(sum(v[0] for v in c.values()) for _, c in rows)
        switches = statistics.median(sum(v[1] for v in c.values()) for _, c in rows)
        print(
            f"| {transport} | {concurrency} | {name} | {rate:,.0f} | {rate / base:.2f}x | {' | '.join(cells)} | "
            f"{total:,.0f} | {switches:.1f} |"
        )


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
