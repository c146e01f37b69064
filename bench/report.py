"""Aggregation over rounds, the printed table and bench/RESULTS.md."""

from __future__ import annotations

import os
import platform
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

from bench.loads import LoadResult
from bench.models import Floor

COLUMNS = (
    "server",
    "workload",
    "transport",
    "concurrency",
    "req/s (median)",
    "p50 ms",
    "p99 ms",
    "errors",
    "floor (session.run ms)",
    "overhead p50 - floor",
    "overhead % of floor (c1)",
    "p99 / p50",
)

#: The issue's MiniLM goals: p99 at most 1.5x p50 at concurrency 8, and
#: overhead (p50 - floor) under 3% of the floor at concurrency 1.
MINILM_P99_P50_MAX = 1.5
MINILM_OVERHEAD_MAX = 0.03
OK, NOT_OK = "✓", "✗"

#: Ratio columns: (header, the server compared with, which rows get it).
#: A ratio is this row's req/s over the other server's in the same
#: workload, transport and concurrency (above 1: this row is faster).
PEERS = (("vs Triton", "triton"), ("vs MLServer", "mlserver"))
WORKERS = ("workers / in-process", "serve", "serve-workers")


@dataclass
class Cell:
    """One target x workload, with a LoadResult per round."""

    target: str
    model: str
    transport: str
    concurrency: int
    floor: Floor
    ours: bool = False  # this project's server (gets ratios against the peers)
    slow: bool = False  # a slow model (MiniLM): its own duration and rounds, goal flags
    planned_rounds: int = 0
    seconds: int = 0  # measured seconds per round
    results: list[LoadResult] = field(default_factory=list)

    @property
    def key(self) -> tuple[str, str, int]:
        return (self.model, self.transport, self.concurrency)

    @property
    def label(self) -> str:
        return f"{self.target}/{self.model}/{self.transport}/c{self.concurrency}"

    @property
    def rps(self) -> float:
        return statistics.median(r.rps for r in self.results)

    @property
    def p50_ms(self) -> float:
        return statistics.median(r.p50_ms for r in self.results)

    @property
    def p99_ms(self) -> float:
        return statistics.median(r.p99_ms for r in self.results)

    @property
    def errors(self) -> int:
        return sum(r.errors for r in self.results)

    @property
    def requests(self) -> int:
        return sum(r.requests for r in self.results)

    def error_text(self) -> str:
        if not self.errors:
            return "0"
        non200 = sum(r.non200 for r in self.results)
        sock = sum(r.socket_errors for r in self.results)
        no_message = sum(r.no_message for r in self.results)
        status = next((r.first_bad_status for r in self.results if r.first_bad_status), 0)
        parts = []
        if non200:
            parts.append(f"{non200} non-200" + (f" (first {status})" if status else ""))
        if no_message:
            parts.append(f"{no_message} without a message (grpc-status not OK)")
        if sock:
            parts.append(f"{sock} socket/timeout")
        return "**" + ", ".join(parts) + "** of " + str(self.requests)

    @property
    def p99_over_p50(self) -> float:
        return self.p99_ms / self.p50_ms if self.p50_ms > 0 else float("inf")

    @property
    def overhead_fraction(self) -> float:
        """(p50 - floor) / floor."""
        return (self.p50_ms - self.floor.median_ms) / self.floor.median_ms

    def p99_over_p50_text(self) -> str:
        text = f"{self.p99_over_p50:.2f}"
        if self.slow and self.concurrency == 8:
            text += " " + (OK if self.p99_over_p50 <= MINILM_P99_P50_MAX else NOT_OK)
        return text

    def overhead_percent_text(self) -> str:
        """Only for slow models at concurrency 1 (for tiny the floor is microseconds; at 8 p50 is queueing)."""
        if not (self.slow and self.concurrency == 1):
            return ""
        flag = OK if self.overhead_fraction < MINILM_OVERHEAD_MAX else NOT_OK
        return f"{100 * self.overhead_fraction:.2f}% {flag}"

    def row(self) -> list[str]:
        if not self.results:
            floor = f"{self.floor.median_ms:.3f}"
            empty = ["-", "-", "-", "-", floor, "-", "-", "-"]
            return [self.target, self.model, self.transport, str(self.concurrency), *empty]
        return [
            self.target + (" ⚠" if self.errors else ""),
            self.model,
            self.transport,
            str(self.concurrency),
            f"{self.rps:,.0f}",
            f"{self.p50_ms:.2f}",
            f"{self.p99_ms:.2f}",
            self.error_text(),
            f"{self.floor.median_ms:.3f}",
            f"{self.p50_ms - self.floor.median_ms:.2f}",
            self.overhead_percent_text(),
            self.p99_over_p50_text(),
        ]

    def rounds_text(self) -> str:
        return " / ".join(f"{r.rps:,.0f}" for r in self.results)


def ratio_columns(cells: list[Cell]) -> list[tuple[str, str, Callable[[Cell], bool]]]:
    """The ratio columns this run has: (header, other server, rows that get it)."""
    names = {c.target for c in cells}
    columns: list[tuple[str, str, Callable[[Cell], bool]]] = [
        (header, peer, lambda c: c.ours) for header, peer in PEERS if peer in names and any(c.ours for c in cells)
    ]
    header, base, variant = WORKERS
    if base in names and any(n.startswith(variant) for n in names):
        columns.append(
            (header, base, lambda c, v=variant: c.target.startswith(v) and not c.target.endswith("-baseline"))
        )
    if "serve-baseline" in names and "serve-workers-baseline" in names:  # the baseline checkout's worker mode
        columns.append(
            ("baseline workers / in-process", "serve-baseline", lambda c: c.target == "serve-workers-baseline")
        )
    if "serve" in names and "serve-baseline" in names:
        columns.append(("vs baseline", "serve-baseline", lambda c: c.target == "serve"))
    if "serve-workers-tls" in names and "serve-workers-baseline" in names:  # TLS against the baseline's link
        columns.append(("TLS / baseline link", "serve-workers-baseline", lambda c: c.target == "serve-workers-tls"))
    return columns


def ratio_text(cell: Cell, other: Cell | None) -> str:
    if other is None:
        return "n/a"  # the other server does not speak this transport
    if not cell.results or not other.results or other.rps <= 0:
        return "-"
    return f"{cell.rps / other.rps:.2f}x" + (" ⚠" if other.errors else "")


def table(cells: list[Cell]) -> tuple[list[str], list[list[str]]]:
    """The results table: every cell with its ratio columns."""
    by_key = {(c.target, *c.key): c for c in cells}
    extra = ratio_columns(cells)
    header = [*COLUMNS, *(h for h, _, _ in extra)]
    rows = []
    for cell in cells:
        row = cell.row()
        for _, other, applies in extra:
            row.append(ratio_text(cell, by_key.get((other, *cell.key))) if applies(cell) else "")
        rows.append(row)
    return header, rows


def summary(cells: list[Cell]) -> tuple[list[str], list[list[str]]]:
    """req/s (median) by server: one row per workload, transport and concurrency."""
    targets = list(dict.fromkeys(c.target for c in cells))
    by_key = {(c.target, *c.key): c for c in cells}
    keys = list(dict.fromkeys(c.key for c in cells))
    rows = []
    for model, transport, concurrency in keys:
        row = [model, transport, str(concurrency)]
        for target in targets:
            cell = by_key.get((target, model, transport, concurrency))
            if cell is None:
                row.append("n/a")
            elif not cell.results:
                row.append("-")
            else:
                row.append(f"{cell.rps:,.0f}" + (" ⚠" if cell.errors else ""))
        rows.append(row)
    return ["workload", "transport", "concurrency", *targets], rows


MINILM_COLUMNS = (
    "server",
    "transport",
    "concurrency",
    "rounds x s",
    "requests",
    "req/s (median)",
    "p50 ms",
    "p99 ms",
    f"p99 / p50 (c8 goal ≤ {MINILM_P99_P50_MAX})",
    "floor ms",
    "overhead p50 - floor ms",
    f"overhead % of floor (c1 goal < {100 * MINILM_OVERHEAD_MAX:.0f}%)",
    "errors",
)


def minilm_table(cells: list[Cell]) -> tuple[tuple[str, ...], list[list[str]]]:
    """The MiniLM rows with the figures of its goals."""
    rows = []
    for c in cells:
        if not c.slow or not c.results:
            continue
        rows.append(
            [
                c.target + (" ⚠" if c.errors else ""),
                c.transport,
                str(c.concurrency),
                f"{len(c.results)} x {c.seconds}",
                f"{c.requests:,}",
                f"{c.rps:,.1f}",
                f"{c.p50_ms:.2f}",
                f"{c.p99_ms:.2f}",
                c.p99_over_p50_text(),
                f"{c.floor.median_ms:.2f}",
                f"{c.p50_ms - c.floor.median_ms:.2f}",
                c.overhead_percent_text() or "(queueing)",
                c.error_text(),
            ]
        )
    return MINILM_COLUMNS, rows


@dataclass
class Goal:
    """One goal of the issue for ``serve``: met (True/False) or None when not (fully) measured."""

    text: str
    met: bool | None
    details: list[str]

    @property
    def verdict(self) -> str:
        return {True: "met", False: "NOT met", None: "not measured"}[self.met]


def goals(cells: list[Cell], ours: str = "serve") -> list[Goal]:
    """The issue's goals for ``ours``, judged on this run's medians. A compared cell with errors fails."""
    by_key = {(c.target, *c.key): c for c in cells if c.results}

    #: (label, cell keys, value of the cells, passes(value), format of the value)
    Check = tuple[str, tuple, Callable[..., float], Callable[[float], bool], str]

    def judge(text: str, checks: list[Check]) -> Goal:
        details, verdicts = [], []
        for label, keys, value, passes, fmt in checks:
            found = [by_key.get(k) for k in keys]
            if any(c is None for c in found):
                details.append(f"{label} not measured")
                verdicts.append(None)
                continue
            x = value(*found)
            errors = any(c.errors for c in found)
            ok = passes(x) and not errors
            details.append(f"{label} {fmt.format(x)} {OK if ok else NOT_OK}" + (" (errors)" if errors else ""))
            verdicts.append(ok)
        if any(v is False for v in verdicts):
            met = False
        elif verdicts and all(v is True for v in verdicts):
            met = True
        else:
            met = None
        return Goal(text, met, details)

    def ratio(peer: str, model: str, transport: str, c: int, factor: float):
        return (
            f"{model}/{transport}/c{c}",
            ((ours, model, transport, c), (peer, model, transport, c)),
            lambda a, b: a.rps / b.rps if b.rps > 0 else float("inf"),
            lambda x, f=factor: x >= f,
            "{:.2f}x",
        )

    fast = ("tiny", "cnn")
    result = [
        judge(
            "REST binary and gRPC ≥ 1.0x Triton's req/s at concurrency 1 and 8 on tiny and cnn",
            [ratio("triton", m, t, c, 1.0) for m in fast for t in ("rest-binary", "grpc") for c in CONCURRENCIES],
        ),
        judge(
            "gRPC streaming ≥ 1.0x Triton's req/s at concurrency 1 and 8 on tiny and cnn",
            [ratio("triton", m, "grpc-stream", c, 1.0) for m in fast for c in CONCURRENCIES],
        ),
        judge(
            "REST JSON ≥ 3x MLServer's req/s on tiny and cnn (concurrency 1 and 8)",
            [ratio("mlserver", m, "rest-json", c, 3.0) for m in fast for c in CONCURRENCIES],
        ),
        judge(
            "REST JSON ≥ 1.0x Triton's req/s on tiny and cnn (concurrency 1 and 8)",
            [ratio("triton", m, "rest-json", c, 1.0) for m in fast for c in CONCURRENCIES],
        ),
        judge(
            "p50 at concurrency 1 on tiny ≤ 0.35 ms (every transport)",
            [
                (f"tiny/{t}/c1", ((ours, "tiny", t, 1),), lambda a: a.p50_ms, lambda x: x <= 0.35, "{:.3f} ms")
                for t in TRANSPORT_NAMES
            ],
        ),
        judge(
            f"MiniLM p99 ≤ {MINILM_P99_P50_MAX}x p50 at concurrency 8 (every transport)",
            [
                (
                    f"minilm/{t}/c8",
                    ((ours, "minilm", t, 8),),
                    lambda a: a.p99_over_p50,
                    lambda x: x <= MINILM_P99_P50_MAX,
                    "{:.2f}",
                )
                for t in TRANSPORT_NAMES
            ],
        ),
        judge(
            f"MiniLM overhead (p50 - floor) < {100 * MINILM_OVERHEAD_MAX:.0f}% of its session.run time at "
            "concurrency 1 (every transport)",
            [
                (
                    f"minilm/{t}/c1",
                    ((ours, "minilm", t, 1),),
                    lambda a: 100 * a.overhead_fraction,
                    lambda x: x < 100 * MINILM_OVERHEAD_MAX,
                    "{:.2f}%",
                )
                for t in TRANSPORT_NAMES
            ],
        ),
    ]
    return result


CONCURRENCIES = (1, 8)
TRANSPORT_NAMES = ("rest-json", "rest-binary", "grpc")


def goals_markdown(cells: list[Cell]) -> str:
    rows = [[g.text, f"**{g.verdict}**", "; ".join(g.details)] for g in goals(cells)]
    return markdown_table(["goal (`serve`)", "this run", "cells (median req/s ratio or figure)"], rows)


def print_goals(cells: list[Cell]) -> None:
    print("the issue's goals for serve (this run):")
    for g in goals(cells):
        print(f"  [{g.verdict}] {g.text}")
        print(f"      {'; '.join(g.details)}")


def markdown_table(header: list[str] | tuple[str, ...], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def text_table(header: list[str] | tuple[str, ...], rows: list[list[str]], left: int = 4) -> str:
    rows = [[c.replace("**", "") for c in row] for row in rows]
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    fmt = "  ".join(f"{{:<{w}}}" if i < left else f"{{:>{w}}}" for i, w in enumerate(widths))
    out = [fmt.format(*header), "  ".join("-" * w for w in widths)]
    out += [fmt.format(*row) for row in rows]
    return "\n".join(out)


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def machine_info() -> dict[str, str]:
    def version(dist: str) -> str:
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            return "not installed"

    return {
        "CPU": cpu_model(),
        "cores": str(os.cpu_count()),
        "kernel": platform.release(),
        "Python": platform.python_version(),
        "onnxruntime": version("onnxruntime"),
        "numpy": version("numpy"),
        "Django": version("django"),
        **{name: version(name) for name in ("granian", "gunicorn") if version(name) != "not installed"},
        "grpcio": version("grpcio"),
        "tritonclient (checks, gRPC messages)": version("tritonclient"),
    }


HOW_TO_READ = """\
How to read it:

* One row per server, workload, transport and concurrency. Servers:
  `serve` (this project, inference in process), `serve-workers` (this
  project in worker mode: Celery over Redis to one `runworker` process),
  `triton` and `mlserver` (the peers, see their sections above). Every
  server runs the same ONNX model files with the same ONNX Runtime version
  and thread settings, on the same machine, loaded by the same tools.
* **req/s**, **p50 ms**, **p99 ms** are medians over the rounds. Rounds are
  interleaved: in every round each cell runs once, and the servers take
  turns on the same workload, transport and concurrency, so slow drift of a
  noisy machine spreads over all of them instead of hitting one. Latency is
  the load generator's, per request, from sending the request to the last
  byte of the answer, over a kept-alive connection (wrk: HTTP/1.1; h2load:
  HTTP/2, one stream per connection).
* **floor** is the median in-process `InferenceSession.run` time of the same
  model and input with the same ONNX Runtime settings: what a request would
  cost with no server at all.
* **overhead p50 - floor** is what the server adds on top (protocol,
  framework, decoding the request, encoding the answer, copies, and in
  worker mode the round trip through Redis). It is meaningful at
  concurrency 1; at concurrency 8 p50 also holds queueing (8 requests share
  2 cores with the load generator), so there it is mostly waiting.
  **overhead % of floor (c1)**: the same as a share of the floor, for
  MiniLM at concurrency 1 (the issue's goal: under 3%, flagged ✓/✗).
* **p99 / p50**: the tail against the median; for MiniLM at concurrency 8
  the issue's goal is at most 1.5 (flagged ✓/✗).
* MiniLM cells are measured longer and in fewer rounds than the others
  (see Load above); their rounds are the first rounds of the run.
* **vs Triton**, **vs MLServer**: this row's req/s over the peer's in the
  same workload, transport and concurrency (above 1x: this row is faster);
  `n/a` where the peer does not speak the transport (MLServer has no binary
  tensor extension). **workers / in-process**: worker mode's req/s over the
  in-process server's, the cost of the worker hop.
* With concurrency 1 the client waits for each answer, so req/s ≈ 1000 /
  mean latency. With concurrency 8 req/s is the server's throughput on this
  machine; the load generator runs on the same 2 cores and takes part of
  them.
* **errors**, summed over all rounds: non-200 responses (wrk: counted by the
  Lua `response` hook; h2load: its status counts), socket errors and
  timeouts, and for gRPC answers without a message (h2load cannot see
  `grpc-status`; a failed call is trailers-only, so answers short of the
  expected message bytes are counted). A row with errors is marked ⚠ and
  its figures should not be trusted.
"""


GOALS_INTRO = """\
Each goal of the issue for this project's server in process (`serve`),
judged on this run's medians (the cells are in the tables below; ✓ passes,
✗ does not; a compared cell with errors fails). On this 2-core machine the
load generator shares the cores with the server, and the machine is shared
with other work (load average above): these verdicts hold for this run."""

MINILM_INTRO = """\
The MiniLM rows of the table above with the figures of its goals: p99 at
most 1.5x p50 at concurrency 8 (requests served in order, none starved)
and overhead under 3% of its session.run time at concurrency 1. MiniLM
runs at ~30 req/s per core, so its cells are measured longer (rounds x
seconds, requests summed over the rounds) to give p99 enough samples."""


def write_results(
    path: Path,
    cells: list[Cell],
    *,
    command: str,
    target_settings: dict[str, dict[str, str]],
    load_settings: dict[str, str],
    models_text: list[str],
    started: float,
    finished: float,
    aborted: str = "",
    notes: list[str] | None = None,
    appendix: str = "",
) -> None:
    info = machine_info()
    lines = [
        "# Benchmark results",
        "",
        f"Date: {time.strftime('%Y-%m-%d %H:%M:%S %Z', time.localtime(started))} "
        f"(took {(finished - started) / 60:.1f} min)",
        "",
        f"Command: `{command}`",
        "",
    ]
    if aborted:
        lines += [f"**The run was cut short: {aborted}**", ""]
    if notes:
        lines += [f"**{note}**" for note in notes] + [""]
    lines += ["## Machine", ""]
    lines += [f"* {key}: {value}" for key, value in info.items()]
    lines += ["", "## Load", ""]
    lines += [f"* {key}: {value}" for key, value in load_settings.items()]
    lines += ["", "## Models", ""]
    lines += [f"* {text}" for text in models_text]
    for name, settings in target_settings.items():
        lines += ["", f"## Server `{name}`", ""]
        lines += [f"* {key}: {value}" for key, value in settings.items()]
    lines += ["", "## The issue's goals", "", GOALS_INTRO, "", goals_markdown(cells), ""]
    header, rows = table(cells)
    lines += ["", "## Results", "", markdown_table(header, rows), "", HOW_TO_READ]
    header, rows = minilm_table(cells)
    if rows:
        lines += ["## MiniLM-L6", "", MINILM_INTRO, "", markdown_table(header, rows), ""]
    header, rows = summary(cells)
    lines += ["## req/s by server", "", "The same medians side by side.", "", markdown_table(header, rows), ""]
    lines += [
        "## req/s per round",
        "",
        "The spread between rounds shows how noisy the machine was.",
        "",
        markdown_table(["cell", "req/s per round"], [[c.label, c.rounds_text()] for c in cells if c.results]),
        "",
    ]
    if appendix:
        lines += [appendix, ""]
    path.write_text("\n".join(lines))


def print_table(cells: list[Cell]) -> None:
    header, rows = table(cells)
    print(text_table(header, rows))
    header, rows = minilm_table(cells)
    if rows:
        print()
        print("MiniLM-L6")
        print(text_table(header, rows, left=3))
    print()
    header, rows = summary(cells)
    print("req/s (median) by server")
    print(text_table(header, rows, left=3))
