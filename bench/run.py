"""Benchmark entry point (``make bench``): build the models, measure the
in-process floor, start the server(s), check correctness, load every cell
with wrk in interleaved rounds, print the table and write bench/RESULTS.md.

    .venv/bin/python bench/run.py [--duration S] [--rounds N] [--only TEXT] [--quick]

See bench/README.md.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from bench import models as bench_models  # noqa: E402
from bench.loads import Loader, LoadResult, make_loaders  # noqa: E402
from bench.report import Cell, print_table, write_results  # noqa: E402
from bench.targets import ServeTarget, Target  # noqa: E402
from bench.workloads import TRANSPORTS, Transport, Workload, workloads  # noqa: E402

WORK = ROOT / "bench" / "work"
RESULTS = ROOT / "bench" / "RESULTS.md"
CONCURRENCIES = [1, 8]


class TargetDied(RuntimeError):
    pass


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration", type=int, default=5, help="measured seconds per cell and round (5)")
    parser.add_argument("--warmup", type=int, default=1, help="warm-up seconds before each measurement (1; 0: none)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds; medians are reported (3)")
    parser.add_argument(
        "--only", action="append", default=[], help="run only cells whose label (e.g. serve/cnn/rest-binary/c8) "
        "contains this text; repeatable (any match)"
    )  # fmt: skip
    parser.add_argument("--quick", action="store_true", help="smoke run: 1 round of 2 s (results to bench/work/)")
    parser.add_argument("--workers", type=int, default=None, help="server --workers (default: its HTTP_WORKERS)")
    parser.add_argument("--threads", type=int, default=None, help="server --threads (default: its HTTP_THREADS)")
    parser.add_argument(
        "--max-restarts", type=int, default=2, help="restart a server that exits mid-run this many times, "
        "redoing the cell (recorded as an incident); then give up (2)"
    )  # fmt: skip
    parser.add_argument("--results", type=Path, default=None, help="where to write the Markdown results")
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.duration = 1, 2
    args.results_given = args.results is not None
    if args.results is None:
        args.results = WORK / "RESULTS-quick.md" if args.quick else RESULTS
    if args.rounds < 1 or args.duration < 1:
        parser.error("--rounds and --duration must be at least 1")
    return args


def check_correctness(target: Target, transport: Transport, model: bench_models.BenchModel, expected) -> None:
    """One request; the output must match in-process ONNX Runtime. Exits on mismatch."""
    request = transport.build_request(model, model.sample_input())
    http = urllib.request.Request(
        target.base_url + request.path, data=request.body, headers=request.headers, method=request.method
    )
    what = f"{target.name}/{model.name}/{transport.name}"
    try:
        with urllib.request.urlopen(http, timeout=60) as response:
            status, headers, body = response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as exc:
        status, headers, body = exc.code, dict(exc.headers), exc.read()
    if status != 200:
        sys.exit(f"CORRECTNESS CHECK FAILED for {what}: HTTP {status}: {body[:500]!r}")
    try:
        got = transport.decode_response(model, headers, body)
    except (ValueError, KeyError) as exc:
        sys.exit(f"CORRECTNESS CHECK FAILED for {what}: cannot decode the response ({exc}): {body[:300]!r}")
    if got.shape != expected.shape or not np.allclose(got, expected, rtol=1e-5, atol=1e-5):
        sys.exit(
            f"CORRECTNESS CHECK FAILED for {what}: the output differs from in-process ONNX Runtime\n"
            f"  got      {got.shape} {got.ravel()[:8]}\n  expected {expected.shape} {expected.ravel()[:8]}"
        )
    print(f"  ok  {what}: output {list(got.shape)} matches onnxruntime")


class Bench:
    """The plan (target x workload cells) and its execution."""

    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.loaders: dict[str, Loader] = make_loaders(WORK)
        self.transports = list(TRANSPORTS.values())
        self.repository = WORK / "repository"
        self.targets: list[Target] = [
            ServeTarget(self.repository, WORK, workers=args.workers, threads=args.threads),
        ]
        self.plan: list[tuple[Target, Workload]] = [
            (target, w)
            for target in self.targets
            for w in workloads(list(bench_models.MODELS.values()), self.transports, CONCURRENCIES)
            if w.transport.name in target.transports
        ]
        if args.only:
            self.plan = [(t, w) for t, w in self.plan if any(text in f"{t.name}/{w.label}" for text in args.only)]
        self.targets = [t for t in self.targets if any(t is pt for pt, _ in self.plan)]
        self.models = {w.model.name: w.model for _, w in self.plan}
        self.floors: dict[str, bench_models.Floor] = {}
        self.expected: dict[str, np.ndarray] = {}
        self.cells: list[Cell] = []
        self.incidents: list[str] = []  # servers that exited mid-run (with their log tails)
        self.restarts = 0

    def missing_tools(self) -> list[str]:
        names = {w.transport.loader for _, w in self.plan}
        return [problem for name in sorted(names) if (problem := self.loaders[name].available())]

    def prepare(self) -> None:
        """Write the repository and measure the floor of every model in the plan."""
        bench_models.write_repository(self.repository, list(bench_models.MODELS.values()))
        print(f"models in {self.repository.relative_to(ROOT)}; measuring the floor (in-process session.run, 1 thread)")
        for model in self.models.values():
            path = bench_models.model_path(self.repository, model)
            self.floors[model.name] = floor = bench_models.measure_floor(path, model)
            self.expected[model.name] = bench_models.reference_output(path, model, model.sample_input())
            print(f"  {model.name}: {floor.median_ms:.3f} ms median over {floor.runs} runs")
        self.cells = [
            Cell(t.name, w.model.name, w.transport.name, w.concurrency, self.floors[w.model.name]) for t, w in self.plan
        ]

    def start(self, target: Target) -> None:
        print(f"starting {target.name} ...")
        target.start()
        print(f"  ready at {target.base_url}  {target.settings()}")
        print("  correctness check")
        checks = {(w.model.name, w.transport.name): w for t, w in self.plan if t is target}
        for _, w in sorted(checks.items()):
            check_correctness(target, w.transport, w.model, self.expected[w.model.name])

    def measure(self, target: Target, workload: Workload) -> LoadResult | None:
        """Warm-up then one measurement; None when the target exited meanwhile."""
        loader = self.loaders[workload.transport.loader]
        request = workload.transport.build_request(workload.model, workload.model.sample_input())
        try:
            if self.args.warmup > 0:
                loader.run(target.base_url, request, workload.concurrency, self.args.warmup)
            result = loader.run(target.base_url, request, workload.concurrency, self.args.duration)
        except RuntimeError:
            if target.alive():
                raise
            return None
        return result if target.alive() else None

    def run_cell(self, target: Target, workload: Workload, cell: Cell, round_no: int) -> LoadResult:
        """measure(), restarting a target that died (up to --max-restarts over the run)."""
        while True:
            result = self.measure(target, workload)
            if result is not None:
                return result
            what = f"{target.name} exited during round {round_no}, cell {cell.label} ({target.exit_info()})"
            log = target.log_tail()
            self.incidents.append(f"{what}\n\n```\n{log}\n```")
            print(f"\nSERVER EXITED: {what}; last lines of its log:\n{log}\n", file=sys.stderr)
            if self.restarts >= self.args.max_restarts:
                raise TargetDied(what)
            self.restarts += 1
            print(f"restarting {target.name} and redoing the cell (restart {self.restarts}/{self.args.max_restarts})")
            target.stop()
            self.start(target)

    def run(self) -> str:
        """All rounds; returns why the run was cut short, or ""."""
        args = self.args
        try:
            for target in self.targets:
                self.start(target)
            total = len(self.plan) * args.rounds * (args.duration + args.warmup)
            print(f"load: {len(self.plan)} cells x {args.rounds} rounds x ({args.warmup} s warm-up + "
                  f"{args.duration} s) ≈ {total / 60:.1f} min")  # fmt: skip
            for round_no in range(1, args.rounds + 1):
                for (target, workload), cell in zip(self.plan, self.cells):
                    result = self.run_cell(target, workload, cell, round_no)
                    cell.results.append(result)
                    flag = f"  ERRORS {result.errors}" if result.errors else ""
                    print(
                        f"  round {round_no}/{args.rounds}  {cell.label:<32} {result.rps:9,.0f} req/s"
                        f"  p50 {result.p50_ms:8.2f} ms  p99 {result.p99_ms:8.2f} ms{flag}",
                        flush=True,
                    )
        except KeyboardInterrupt:
            print("interrupted; writing what was measured")
            return "interrupted"
        except TargetDied as exc:
            return f"{exc}; gave up after {self.restarts} restart(s)"
        finally:
            for target in self.targets:
                target.stop()
        return ""

    def models_text(self) -> list[str]:
        lines = []
        for m in self.models.values():
            floor = self.floors[m.name]
            sizes = ", ".join(
                f"{t.name} {len(t.build_request(m, m.sample_input()).body):,} B"
                for t in self.transports
                if any(w.model is m and w.transport is t for _, w in self.plan)
            )
            lines.append(
                f"`{m.name}`: FP32 {m.describe()}; request body: {sizes}; floor {floor.median_ms:.3f} ms "
                f"(median of {floor.runs:,} in-process runs, p99 {floor.p99_ms:.3f} ms)"
            )
        return lines


def load_average_text() -> str:
    text = " / ".join(f"{x:.2f}" for x in os.getloadavg())
    if os.getloadavg()[0] > 0.5 * (os.cpu_count() or 1):
        text += " — the machine was busy with other work; expect lower req/s and longer p99, most at concurrency 8"
    return text


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    started = time.time()
    load_before = load_average_text()
    command = shlex.join([".venv/bin/python", "bench/run.py", *argv])
    bench = Bench(args)
    if not bench.plan:
        print(f"no cell matches --only {args.only}", file=sys.stderr)
        return 2
    missing = bench.missing_tools()
    if missing:
        print("\n".join(missing), file=sys.stderr)
        return 2
    bench.prepare()
    aborted = bench.run()
    cells = bench.cells
    if not any(cell.results for cell in cells):
        print(f"nothing was measured ({aborted})", file=sys.stderr)
        return 1

    print()
    print_table(cells, len(bench.targets) > 1)
    wrk = bench.loaders["wrk"]
    load_settings = {
        "loader": f"wrk {wrk.version()} (HTTP/1.1 keep-alive), Lua script POSTs one prebuilt body",
        "connections": "concurrency 1: wrk -t1 -c1; concurrency 8: wrk -t2 -c8",
        "per cell": f"{args.warmup} s warm-up (discarded) + {args.duration} s measured",
        "rounds": f"{args.rounds} (interleaved; medians reported)",
        "machine load average before the run (1/5/15 min)": load_before,
        "machine load average after the run (1/5/15 min)": load_average_text(),
        "correctness": "one request per model and transport checked against in-process onnxruntime (allclose)",
    }
    appendix = ""
    if bench.incidents:
        appendix = "## Incidents\n\nA server exited in the middle of the run; it was restarted and the cell redone.\n\n"
        appendix += "\n\n".join(f"* {text}" for text in bench.incidents)
    results = args.results
    if aborted and not args.results_given:
        results = WORK / "RESULTS-partial.md"  # keep the last complete RESULTS.md
    write_results(
        results,
        cells,
        command=command,
        target_settings={t.name: t.settings() for t in bench.targets},
        load_settings=load_settings,
        models_text=bench.models_text(),
        started=started,
        aborted=aborted,
        appendix=appendix,
    )
    print(f"\nwrote {results.relative_to(ROOT) if results.is_relative_to(ROOT) else results}")
    if any(cell.errors for cell in cells):
        print("WARNING: some cells had errors (marked ⚠)")
    if bench.incidents:
        print(f"WARNING: {len(bench.incidents)} server exit(s) during the run; see Incidents in the results")
    if aborted:
        print(f"WARNING: the run was cut short: {aborted}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
