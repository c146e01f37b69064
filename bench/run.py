"""Benchmark entry point (``make bench``): build the models (tiny, cnn, and
MiniLM-L6 exported by bench/minilm.py), measure the in-process floor, start
every server (this project in process and in worker mode, Triton, MLServer),
check their answers, load every cell in interleaved rounds (wrk for REST,
h2load for gRPC), print one table and the issue's goals, and write
bench/RESULTS.md.

    .venv/bin/python bench/run.py [--servers serve,serve-workers,triton,mlserver] [--no-peers]
                                  [--duration S] [--rounds N] [--only TEXT] [--quick]
                                  [--no-minilm] [--minilm-duration S] [--minilm-rounds N]

See bench/README.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shlex
import signal
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from bench import models as bench_models  # noqa: E402
from bench.checks import CheckFailed, check_grpc, check_grpc_stream, check_rest  # noqa: E402
from bench.loads import Loader, LoadResult, make_loaders  # noqa: E402
from bench.report import Cell, print_goals, print_table, write_results  # noqa: E402
from bench.targets import BASELINE_REDIS_URL, TLS_REDIS_URL, ServeTarget, Target, WorkerServeTarget, ort_env  # noqa: E402
from bench.workloads import TRANSPORTS, Grpc, GrpcStream, Request, Workload, workloads  # noqa: E402

WORK = ROOT / "bench" / "work"
RESULTS = ROOT / "bench" / "RESULTS.md"
CONCURRENCIES = [1, 8]
SERVERS = (
    "serve", "serve-workers", "triton", "mlserver", "serve-workers-tls", "serve-baseline", "serve-workers-baseline",
)  # fmt: skip
#: Servers a run has unless --servers names them.
DEFAULT_SERVERS = SERVERS[:4]
PEERS = ("triton", "mlserver")
#: Connections of the priming load (every server process should get some).
PRIME_CONCURRENCY = 8


class TargetDied(RuntimeError):
    pass


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration", type=int, default=5, help="measured seconds per cell and round (5)")
    parser.add_argument("--warmup", type=int, default=1, help="warm-up seconds before each measurement (1; 0: none)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds; medians are reported (3)")
    parser.add_argument(
        "--servers",
        default=",".join(DEFAULT_SERVERS),
        help=f"comma-separated servers to run, of {','.join(SERVERS)} ({','.join(DEFAULT_SERVERS)})",
    )
    parser.add_argument("--no-peers", action="store_true", help="leave out the peers (triton, mlserver)")
    parser.add_argument(
        "--baseline",
        default="",
        help="another checkout of this project (e.g. a git worktree of an earlier commit): adds the server "
        "serve-baseline (unless another *-baseline server is listed), run from there, and a 'vs baseline' "
        "ratio for serve's rows",
    )
    parser.add_argument(
        "--baseline-transport",
        choices=("celery", "direct", "direct-tcp"),
        default="direct-tcp",
        help="how serve-workers-baseline (a checkout from before TLS) reaches its worker: celery (from before the "
        "direct transport), direct, direct-tcp (direct over TCP, the plain link TLS replaced; the default)",
    )
    parser.add_argument(
        "--only", action="append", default=[], help="run only cells whose label (e.g. serve/cnn/rest-binary/c8) "
        "contains this text; repeatable (any match)"
    )  # fmt: skip
    parser.add_argument(
        "--quick", action="store_true", help="smoke run: 1 round of 2 s, MiniLM 1 round of 3 s (results to bench/work/)"
    )
    parser.add_argument("--no-minilm", action="store_true", help="leave out the MiniLM workload")
    parser.add_argument(
        "--minilm-duration", type=int, default=10, help="measured seconds per MiniLM cell and round (10; "
        "~30 req/s, so p99 needs the samples)"
    )  # fmt: skip
    parser.add_argument("--minilm-rounds", type=int, default=2, help="interleaved rounds of the MiniLM cells (2)")
    parser.add_argument(
        "--prime", type=int, default=1, help="seconds of load at concurrency 8 per server, model and transport "
        "after the correctness check, so that every server process has loaded every model before it is measured "
        "(MiniLM: twice as long; 0: none) (1)"
    )  # fmt: skip
    parser.add_argument("--workers", type=int, default=None, help="serve --workers (default: its HTTP_WORKERS)")
    parser.add_argument("--threads", type=int, default=None, help="serve --threads (default: its HTTP_THREADS)")
    parser.add_argument("--triton-instances", type=int, default=2, help="Triton instance_group count per model (2)")
    parser.add_argument(
        "--mlserver-workers", type=int, default=0, help="MLServer parallel_workers (0: inference in the server "
        "process; MLServer's own default, 1, adds an inference process and measured about half as fast here)"
    )  # fmt: skip
    parser.add_argument(
        "--max-restarts", type=int, default=2, help="restart a server that exits mid-run this many times, "
        "redoing the cell (recorded as an incident); then give up (2)"
    )  # fmt: skip
    parser.add_argument("--results", type=Path, default=None, help="where to write the Markdown results")
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.duration = 1, 2
        args.minilm_rounds, args.minilm_duration = 1, 3
    args.results_given = args.results is not None
    # bench/RESULTS.md keeps the latest full run: a quick or narrowed one (fewer servers or cells) goes to bench/work/.
    narrowed = args.only or args.no_peers or args.no_minilm or args.servers != ",".join(DEFAULT_SERVERS)
    if args.results is None and args.quick:
        args.results = WORK / "RESULTS-quick.md"
    elif args.results is None:
        args.results = WORK / "RESULTS-narrowed.md" if narrowed else RESULTS
    if min(args.rounds, args.duration, args.minilm_rounds, args.minilm_duration) < 1:
        parser.error("--rounds, --duration, --minilm-rounds and --minilm-duration must be at least 1")
    args.server_names = [s.strip() for s in args.servers.split(",") if s.strip()]
    unknown = sorted(set(args.server_names) - set(SERVERS))
    if unknown:
        parser.error(f"unknown servers {unknown}; choose from {', '.join(SERVERS)}")
    if args.no_peers:
        args.server_names = [s for s in args.server_names if s not in PEERS]
    if args.baseline:
        args.baseline = Path(args.baseline).resolve()
        if not (args.baseline / "manage.py").is_file():
            parser.error(f"--baseline {args.baseline}: no manage.py there")
        if not any(name.endswith("-baseline") for name in args.server_names):
            args.server_names.append("serve-baseline")
    if not args.server_names:
        parser.error("no server left to run")
    return args


def make_target(name: str, args: argparse.Namespace, repository: Path) -> Target:
    """A server; the models it serves are set once the plan is known (Bench.__init__)."""
    if name == "serve":
        return ServeTarget(repository, WORK, workers=args.workers, threads=args.threads)
    if name == "serve-workers":
        return WorkerServeTarget(repository, WORK, workers=args.workers, threads=args.threads)
    if name == "serve-baseline":
        return ServeTarget(repository, WORK, name=name, workers=args.workers, threads=args.threads, root=args.baseline)
    if name == "serve-workers-baseline":  # worker mode of a baseline checkout (--baseline-transport)
        return WorkerServeTarget(
            repository, WORK, name=name, workers=args.workers, threads=args.threads, transport=args.baseline_transport,
            redis_url=BASELINE_REDIS_URL, root=args.baseline,
        )  # fmt: skip
    if name == "serve-workers-tls":  # worker mode as across machines: TCP with mutual TLS
        return WorkerServeTarget(
            repository, WORK, name=name, workers=args.workers, threads=args.threads, link="tls",
            redis_url=TLS_REDIS_URL,
        )  # fmt: skip
    if name == "triton":
        from bench.peers.triton import TritonTarget

        return TritonTarget(repository, WORK, [], instances=args.triton_instances)
    if name == "mlserver":
        from bench.peers.mlserver import MLServerTarget

        return MLServerTarget(repository, WORK, [], parallel_workers=args.mlserver_workers)
    raise ValueError(name)


def repository_view(repository: Path, names: list[str]) -> Path:
    """A directory of symlinks to ``names`` in ``repository``: what ``serve`` imports (it
    imports everything in its directory, and only the plan's models should load)."""
    view = WORK / "repositories" / "-".join(names)
    view.mkdir(parents=True, exist_ok=True)
    for entry in view.iterdir():
        if entry.name not in names:
            entry.unlink()
    for name in names:
        link = view / name
        if link.is_symlink() and link.resolve() == (repository / name).resolve():
            continue
        link.unlink(missing_ok=True)
        link.symlink_to((repository / name).resolve(), target_is_directory=True)
    return view


class Bench:
    """The plan (target x workload cells) and its execution."""

    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.loaders: dict[str, Loader] = make_loaders(WORK)
        self.transports = list(TRANSPORTS.values())
        self.repository = WORK / "repository"
        self.targets: list[Target] = [make_target(name, args, self.repository) for name in args.server_names]
        candidates = [m for m in bench_models.MODELS.values() if not (args.no_minilm and m.name == "minilm")]
        # Servers take turns on each workload x transport x concurrency.
        self.plan: list[tuple[Target, Workload]] = [
            (target, w)
            for w in workloads(candidates, self.transports, CONCURRENCIES)
            for target in self.targets
            if w.transport.name in target.transports
        ]
        if args.only:
            self.plan = [(t, w) for t, w in self.plan if any(text in f"{t.name}/{w.label}" for text in args.only)]
        self.targets = [t for t in self.targets if any(t is pt for pt, _ in self.plan)]
        self.models = {w.model.name: w.model for _, w in self.plan}
        for target in self.targets:
            # Each server serves exactly the models it is measured on.
            served = [m for m in self.models.values() if any(pt is target and w.model is m for pt, w in self.plan)]
            if isinstance(target, ServeTarget):
                target.repository = repository_view(self.repository, [m.name for m in served])
            else:
                target.models = served
        self.floors: dict[str, bench_models.Floor] = {}
        self.inputs: dict[str, dict[str, np.ndarray]] = {}
        self.expected: dict[str, dict[str, np.ndarray]] = {}
        self.requests: dict[tuple[str, str], Request] = {}  # (model, transport) -> the prebuilt request
        self.response_bytes: dict[tuple[str, str], int] = {}  # (target, model) -> framed gRPC answer size
        self.cells: list[Cell] = []
        self.incidents: list[str] = []  # servers that exited mid-run (with their log tails)
        self.notes: list[str] = []  # peers left out (could not be installed, started or checked)
        self.started: list[Target] = []
        self.restarts = 0

    def duration(self, workload: Workload) -> int:
        """Measured seconds of a cell: slow models (MiniLM) get --minilm-duration."""
        return self.args.minilm_duration if workload.model.slow else self.args.duration

    def rounds(self, workload: Workload) -> int:
        return self.args.minilm_rounds if workload.model.slow else self.args.rounds

    def request(self, model: bench_models.BenchModel, transport) -> Request:
        key = (model.name, transport.name)
        if key not in self.requests:
            self.requests[key] = transport.build_request(model, self.inputs[model.name])
        return self.requests[key]

    def missing_tools(self) -> list[str]:
        names = {w.transport.loader for _, w in self.plan}
        return [problem for name in sorted(names) if (problem := self.loaders[name].available())]

    def drop(self, target: Target, reason: str) -> None:
        """Leave a peer out of the run (this project's servers are never dropped)."""
        if target.ours:
            sys.exit(f"{target.name}: {reason}")
        note = f"{target.name} was left out of this run: {reason}"
        print(f"WARNING: {note}", file=sys.stderr)
        self.notes.append(note.splitlines()[0])
        self.plan = [(t, w) for t, w in self.plan if t is not target]
        self.targets = [t for t in self.targets if t is not target]

    def prepare(self) -> None:
        """Write the repository (MiniLM: built once by bench/minilm.py), measure the floor of
        every model in the plan, build the peers' virtualenvs (cached)."""
        models = list(self.models.values())
        if "minilm" in self.models:
            print("MiniLM: bench/minilm.py builds the model once (a virtualenv with torch, an offline export)")
        bench_models.write_repository(self.repository, models, self.args.triton_instances)
        threads = ort_env()
        print(
            f"models in {self.repository.relative_to(ROOT)}; measuring the floor (in-process session.run, "
            f"intra-op {threads['ORT_INTRA_OP_THREADS']}, inter-op {threads['ORT_INTER_OP_THREADS']})"
        )
        for model in models:
            path = bench_models.model_path(self.repository, model)
            self.inputs[model.name] = inputs = model.sample_inputs(self.repository)
            self.floors[model.name] = floor = bench_models.measure_floor(path, model, inputs)
            self.expected[model.name] = bench_models.reference_outputs(path, model, inputs)
            print(f"  {model.name}: {floor.median_ms:.3f} ms median over {floor.runs} runs")
        for target in list(self.targets):
            venv = getattr(target, "venv", None)
            if venv is not None:
                try:
                    venv.ensure()
                except RuntimeError as exc:
                    self.drop(target, f"its virtualenv could not be built ({exc})")
        for target in self.targets:
            if isinstance(target, WorkerServeTarget):
                # Ready once an inference goes through: the quickest model it serves.
                model = min((w.model for t, w in self.plan if t is target), key=lambda m: self.floors[m.name].median_ms)
                probe = self.request(model, TRANSPORTS["rest-binary"])
                target.probe = (probe.path, probe.body, probe.headers)

    def make_cells(self) -> None:
        self.cells = [
            Cell(
                t.name,
                w.model.name,
                w.transport.name,
                w.concurrency,
                self.floors[w.model.name],
                ours=t.ours,
                slow=w.model.slow,
                planned_rounds=self.rounds(w),
                seconds=self.duration(w),
            )
            for t, w in self.plan
        ]

    def check(self, target: Target) -> None:
        """Every model and transport this target is loaded with; raises CheckFailed."""
        print("  correctness check")
        checks = {(w.model.name, w.transport.name): w for t, w in self.plan if t is target}
        for _, w in sorted(checks.items()):
            what = f"{target.name}/{w.model.name}/{w.transport.name}"
            inputs, expected = self.inputs[w.model.name], self.expected[w.model.name]
            if isinstance(w.transport, GrpcStream):
                text = check_grpc_stream(target, w.transport, w.model, inputs, expected)
            elif isinstance(w.transport, Grpc):
                text, size = check_grpc(target, w.transport, w.model, inputs, expected)
                self.response_bytes[(target.name, w.model.name)] = size
            else:
                text = check_rest(target, w.transport, w.model, inputs, expected)
            print(f"  ok  {what}: {text}")

    def prime(self, target: Target) -> None:
        """Load every model and transport of the target briefly at concurrency 8, so that every
        server process has loaded every model (sessions load lazily, per process) before any
        cell is measured; MiniLM's load (~90 MB) would otherwise land in a measurement."""
        if self.args.prime <= 0:
            return
        combos = {(w.model.name, w.transport.name): w for t, w in self.plan if t is target}
        started = time.monotonic()
        for _, w in sorted(combos.items()):
            seconds = self.args.prime * (2 if w.model.slow else 1)
            try:
                self.loaders[w.transport.loader].run(
                    target.url_for(w.transport.name), self.measure_request(target, w), PRIME_CONCURRENCY, seconds
                )
            except RuntimeError as exc:
                print(f"  priming {target.name}/{w.model.name}/{w.transport.name} failed: {exc}", file=sys.stderr)
        print(f"  primed {len(combos)} model x transport(s) at concurrency {PRIME_CONCURRENCY} "
              f"({time.monotonic() - started:.0f} s)")  # fmt: skip
        if hasattr(target, "after_prime"):
            target.after_prime()

    def start(self, target: Target) -> None:
        """Start and check a target; a peer that fails is dropped, our server's failure ends the run."""
        print(f"starting {target.name} ...", flush=True)
        self.started.append(target)
        try:
            target.start()
        except RuntimeError as exc:
            target.stop()
            self.drop(target, f"it did not start: {exc}")
            return
        print(f"  ready: REST {target.base_url}, gRPC {target.grpc_address}")
        try:
            self.check(target)
        except CheckFailed as exc:
            target.stop()
            self.drop(target, f"CORRECTNESS CHECK FAILED: {exc}")
            return
        self.prime(target)

    def measure(self, target: Target, workload: Workload) -> LoadResult | None:
        """Warm-up then one measurement; None when the target exited meanwhile."""
        loader = self.loaders[workload.transport.loader]
        request = self.measure_request(target, workload)
        url = target.url_for(workload.transport.name)
        try:
            if self.args.warmup > 0:
                loader.run(url, request, workload.concurrency, self.args.warmup)
            result = loader.run(url, request, workload.concurrency, self.duration(workload))
        except RuntimeError:
            if target.alive():
                raise
            return None
        return result if target.alive() else None

    def measure_request(self, target: Target, workload: Workload) -> Request:
        """The prebuilt request, with the size of the target's checked gRPC answer."""
        request = self.request(workload.model, workload.transport)
        return dataclasses.replace(
            request, response_bytes=self.response_bytes.get((target.name, workload.model.name), 0)
        )

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
            if target not in self.targets:
                raise TargetDied(f"{what}; the restart failed")

    def run(self) -> str:
        """All rounds; returns why the run was cut short, or ""."""
        args = self.args
        try:
            for target in list(self.targets):
                self.start(target)
            self.make_cells()
            slow = [c for c in self.cells if c.slow]
            fast = [c for c in self.cells if not c.slow]
            total = sum(c.planned_rounds * (c.seconds + args.warmup) for c in self.cells)
            parts = []
            if fast:
                parts.append(
                    f"{len(fast)} cells x {args.rounds} rounds x ({args.warmup} s warm-up + {args.duration} s)"
                )
            if slow:
                parts.append(
                    f"{len(slow)} MiniLM cells x {args.minilm_rounds} rounds x ({args.warmup} s warm-up + "
                    f"{args.minilm_duration} s)"
                )
            print(f"load: {' + '.join(parts)} ≈ {total / 60:.1f} min")
            last_round = max(c.planned_rounds for c in self.cells)
            for round_no in range(1, last_round + 1):
                for (target, workload), cell in zip(self.plan, self.cells):
                    if round_no > cell.planned_rounds:
                        continue
                    result = self.run_cell(target, workload, cell, round_no)
                    cell.results.append(result)
                    flag = f"  ERRORS {result.errors}" if result.errors else ""
                    print(
                        f"  round {round_no}/{cell.planned_rounds}  {cell.label:<42} {result.rps:9,.0f} req/s"
                        f"  p50 {result.p50_ms:8.2f} ms  p99 {result.p99_ms:8.2f} ms{flag}",
                        flush=True,
                    )
        except KeyboardInterrupt:
            print("interrupted; writing what was measured")
            return "interrupted"
        except TargetDied as exc:
            return f"{exc}; gave up after {self.restarts} restart(s)"
        finally:
            for target in self.started:
                target.stop()
        return ""

    def models_text(self) -> list[str]:
        lines = []
        for m in self.models.values():
            floor = self.floors[m.name]
            sizes = ", ".join(
                f"{t.name} {len(self.request(m, t).body):,} B"
                for t in self.transports
                if any(w.model is m and w.transport is t for _, w in self.plan)
            )
            lines.append(
                f"`{m.name}`: {m.describe()}; {m.about(self.repository)}; request body: {sizes}; floor "
                f"{floor.median_ms:.3f} ms (median of {floor.runs:,} in-process runs, p99 {floor.p99_ms:.3f} ms)"
            )
        return lines


def load_average_text(after: bool = False) -> str:
    text = " / ".join(f"{x:.2f}" for x in os.getloadavg())
    if after:
        # The servers have just stopped: the averages still hold this run's own load.
        text += " (right after the run: these averages include the run's own load, servers and load generators)"
    elif os.getloadavg()[0] > 0.5 * (os.cpu_count() or 1):
        text += " — the machine was busy with other work; expect lower req/s and longer p99, most at concurrency 8"
    return text


def _interrupt(signum, frame) -> None:
    """SIGTERM/SIGHUP end the run like Ctrl-C: the servers run in their own
    sessions, so only run()'s clean-up stops them."""
    raise KeyboardInterrupt(signal.Signals(signum).name)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, _interrupt)
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
    print_table(cells)
    print()
    print_goals(cells)
    has_minilm = any(cell.slow for cell in cells)
    wrk, h2load = bench.loaders["wrk"], bench.loaders["h2load"]
    threads = ort_env()
    load_settings = {
        "REST": f"wrk {wrk.version()} (HTTP/1.1 keep-alive), a Lua script POSTs one prebuilt body, non-200 "
        "counted as errors; concurrency 1: wrk -t1 -c1, 8: wrk -t2 -c8",
        "gRPC": f"h2load (nghttp2 {h2load.version()}, HTTP/2 cleartext) POSTs one prebuilt gRPC-framed "
        "ModelInferRequest to /inference.GRPCInferenceService/ModelInfer (content-type: application/grpc, "
        "te: trailers), one stream per connection; concurrency 1: h2load -c1 -m1 -t1, 8: -c8 -m1 -t2; latency "
        "percentiles from its --log-file; answers without the expected message bytes counted as errors",
        "gRPC streaming": "Triton's perf_analyzer (tritonclient 2.41.0 wheel) --streaming -i grpc: N clients, each "
        "keeping one ModelStreamInfer stream with one request in flight; --concurrency-range N:N, 3 time windows "
        "of a third of the cell's seconds (-s 999: no stability required), --input-data zero with the sample "
        "inputs' shapes; its client-side throughput and latency percentiles; a failed request fails the cell",
        "per cell": f"{args.warmup} s warm-up (discarded) + {args.duration} s measured"
        + (f"; MiniLM cells: {args.warmup} s warm-up + {args.minilm_duration} s measured" if has_minilm else ""),
        "rounds": f"{args.rounds} (interleaved, servers taking turns on each cell; medians reported)"
        + (f"; MiniLM cells: {args.minilm_rounds} (in the first {args.minilm_rounds} round(s))" if has_minilm else ""),
        "priming": (
            f"after its correctness check, every server gets {args.prime} s of load at concurrency "
            f"{PRIME_CONCURRENCY} per model and transport (MiniLM {2 * args.prime} s), not measured, so that "
            "every server process has loaded every model (sessions load lazily, per process) before any cell"
            if args.prime > 0
            else "none (--prime 0)"
        ),
        "ONNX Runtime threads (every server)": f"ORT_INTRA_OP_THREADS={threads['ORT_INTRA_OP_THREADS']}, "
        f"ORT_INTER_OP_THREADS={threads['ORT_INTER_OP_THREADS']}",
        "machine load average before the run (1/5/15 min)": load_before,
        "machine load average after the run (1/5/15 min)": load_average_text(after=True),
        "correctness": "before load, every server x model x transport checked against in-process onnxruntime "
        "(allclose): REST with the exact request wrk sends; gRPC with tritonclient.grpc and with the exact "
        "h2load body through grpcio (grpc-status OK, 3 calls)",
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
        finished=time.time(),
        aborted=aborted,
        notes=bench.notes,
        appendix=appendix,
    )
    print(f"\nwrote {results.relative_to(ROOT) if results.is_relative_to(ROOT) else results}")
    print(f"took {(time.time() - started) / 60:.1f} min")
    if any(cell.errors for cell in cells):
        print("WARNING: some cells had errors (marked ⚠)")
    for note in bench.notes:
        print(f"WARNING: {note}")
    if bench.incidents:
        print(f"WARNING: {len(bench.incidents)} server exit(s) during the run; see Incidents in the results")
    if aborted:
        print(f"WARNING: the run was cut short: {aborted}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
