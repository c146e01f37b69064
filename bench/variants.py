"""The same server under different settings, interleaved: ``serve`` started
once per variant (each with its own environment), loaded in turns.

    .venv/bin/python bench/variants.py [--model tiny] [--transports rest-binary]
        [--concurrency 1,8] [--seconds 3] [--rounds 4] [--workers] default: one:HTTP_THREADS=1,HTTP_BODY_THREADS=0

A variant is ``name:VAR=value,VAR=value`` (``name:`` alone: the defaults);
the first one is the baseline of the ratios. ``PYTHON=/path/to/python`` is
not passed on as a variable: it is the interpreter that runs the variant's
``manage.py`` (a venv's python with the project's requirements installed),
e.g. ``pyenv:PYTHON=/tmp/venv-pyenv/bin/python debian:``. ``CHECKOUT=/path``
is not passed on either: the checkout whose ``manage.py`` runs (a git
worktree of another commit, e.g. ``before:CHECKOUT=/tmp/before after:``). Each round loads every
variant in turn on each transport and concurrency (wrk for REST, h2load for
gRPC, 1 s of warm-up first, not counted), so that the machine's drift falls
on every variant alike. Per cell, medians over rounds: req/s, the ratio to
the baseline, p50, and the server's CPU µs and context switches per
request (every process of its session, from /proc; the load generator not
counted). Afterwards, the threads each HTTP process holds (granian's
blocking-thread pool grows while requests overlap and keeps its threads for
30 s idle).

On a shared two-core machine a single round's ratio varies by ±20% or more
(bench/README.md, "Fewer Python threads"): compare medians of several rounds.

``--workers``: every variant in worker mode (``serve-workers`` as run.py
starts it: one ``runworker --device cpu`` with the variant's environment
too, each variant on its own Redis database from 12 on; at most 3
variants); the CPU and context switches then include the worker's.
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
from bench.targets import ServeTarget, WorkerServeTarget  # noqa: E402
from bench.worker_cost import cells, measure, prepare, rest_probe, role_pids, stop_all, target_sessions  # noqa: E402

WORK = ROOT / "bench" / "work"


def parse_variant(text: str) -> tuple[str, dict[str, str]]:
    """``name:VAR=value,VAR=value`` -> (name, environment)."""
    name, _, assignments = text.partition(":")
    env = {}
    for item in filter(None, assignments.split(",")):
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SystemExit(f"variant {text!r}: expected name:VAR=value,VAR=value")
        env[key] = value
    return name or "default", env


def http_threads(target: ServeTarget) -> list[int]:
    """Threads of each HTTP (granian) process of the target."""
    counts = []
    for pid in role_pids({target.process.pid}, "HTTP"):
        try:
            counts.append(len(os.listdir(f"/proc/{pid}/task")))
        except OSError:
            continue
    return sorted(counts)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("variants", nargs="+", help="name:VAR=value,... (the first is the baseline)")
    parser.add_argument("--model", default="tiny", choices=sorted(bench_models.MODELS))
    parser.add_argument("--transports", default="rest-binary")
    parser.add_argument("--concurrency", default="1,8")
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--workers", action="store_true", help="every variant in worker mode")
    parser.add_argument(
        "--grpc-streams", type=int, default=1, help="concurrent gRPC calls per connection (h2load -m; default 1)"
    )
    args = parser.parse_args(argv)
    if args.workers and len(args.variants) > 3:
        parser.error("--workers: at most 3 variants (Redis databases 12-14)")
    prepared = prepare(bench_models.MODELS[args.model], args.transports, "variants-repository")
    if prepared is None:
        return 2
    repository, transports, requests, loaders = prepared
    loaders["h2load"].streams = max(1, args.grpc_streams)
    variants = [
        (name, env, {"python": env.pop("PYTHON", None), "root": Path(env.pop("CHECKOUT", ROOT)).resolve()})
        for name, env in map(parse_variant, args.variants)
    ]
    targets = [
        WorkerServeTarget(
            repository, WORK, f"variant-{name}", f"redis://127.0.0.1:6379/{12 + number}", extra_env=env, **where
        )
        if args.workers
        else ServeTarget(repository, WORK, name=f"variant-{name}", extra_env=env, **where)
        for number, (name, env, where) in enumerate(variants)
    ]
    if args.workers:  # ready once an inference has gone through the worker
        for target in targets:
            target.probe = rest_probe(bench_models.MODELS[args.model], repository, requests)
    results: dict[tuple, list] = {}
    try:
        for target in targets:
            target.start()
        concurrencies = [int(c) for c in args.concurrency.split(",")]
        for round_no, transport, concurrency, target in cells(args.rounds, transports, concurrencies, targets):
            load, costs = measure(loaders[transport.loader], target, transport.name, requests[transport.name],
                                  concurrency, args.seconds, target_sessions(target))  # fmt: skip
            cpu, switches = sum(c[0] for c in costs.values()), sum(c[1] for c in costs.values())
            results.setdefault((transport.name, concurrency, target.name), []).append(
                (load.rps, load.p50_ms, cpu, switches)
            )
            print(f"round {round_no} {target.name:24} {transport.name:12} c{concurrency}  {load.rps:8,.0f} "
                  f"req/s  {cpu:5.0f} us CPU  {switches:4.1f} cs", flush=True)  # fmt: skip
        threads = {target.name: http_threads(target) for target in targets}
    finally:
        stop_all(targets)
    print_table(results, targets[0].name, args)
    print("\nThreads of each HTTP process after the run: "
          + "; ".join(f"{name} {counts}" for name, counts in threads.items()))  # fmt: skip
    return 0


def print_table(results: dict, baseline: str, args) -> None:
    print(f"\nModel {args.model}; medians of {args.rounds} rounds of {args.seconds:.0f} s.\n")
    print("| transport | c | variant | req/s | ratio | p50 ms | CPU µs/request | cs/request |")
    print("|---|---|---|---|---|---|---|---|")
    for (transport, concurrency, name), rows in results.items():
        rate = statistics.median(r[0] for r in rows)
        base = statistics.median(r[0] for r in results[(transport, concurrency, baseline)])
        print(
            f"| {transport} | {concurrency} | {name.removeprefix('variant-')} | {rate:,.0f} | {rate / base:.2f}x | "
            f"{statistics.median(r[1] for r in rows):.3f} | {statistics.median(r[2] for r in rows):,.0f} | "
            f"{statistics.median(r[3] for r in rows):.1f} |"
        )


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
