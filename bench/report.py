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
)

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

    def row(self) -> list[str]:
        if not self.results:
            floor = f"{self.floor.median_ms:.3f}"
            return [self.target, self.model, self.transport, str(self.concurrency), "-", "-", "-", "-", floor, "-"]
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
    if base in names and variant in names:
        columns.append((header, base, lambda c, v=variant: c.target == v))
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
    header, rows = table(cells)
    lines += ["", "## Results", "", markdown_table(header, rows), "", HOW_TO_READ]
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
    print()
    header, rows = summary(cells)
    print("req/s (median) by server")
    print(text_table(header, rows, left=3))
