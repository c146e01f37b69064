"""Aggregation over rounds, the printed table and bench/RESULTS.md."""

from __future__ import annotations

import os
import platform
import statistics
import time
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

from bench.loads import LoadResult
from bench.models import Floor

COLUMNS = (
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


@dataclass
class Cell:
    """One target x workload, with a LoadResult per round."""

    target: str
    model: str
    transport: str
    concurrency: int
    floor: Floor
    results: list[LoadResult] = field(default_factory=list)

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
        status = next((r.first_bad_status for r in self.results if r.first_bad_status), 0)
        parts = []
        if non200:
            parts.append(f"{non200} non-200" + (f" (first {status})" if status else ""))
        if sock:
            parts.append(f"{sock} socket/timeout")
        return "**" + ", ".join(parts) + "** of " + str(self.requests)

    def row(self, multi_target: bool) -> list[str]:
        workload = f"{self.target}: {self.model}" if multi_target else self.model
        if not self.results:
            floor = f"{self.floor.median_ms:.3f}"
            return [workload, self.transport, str(self.concurrency), "-", "-", "-", "-", floor, "-"]
        return [
            workload + (" ⚠" if self.errors else ""),
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


def markdown_table(header: list[str] | tuple[str, ...], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def text_table(header: list[str] | tuple[str, ...], rows: list[list[str]]) -> str:
    rows = [[c.replace("**", "") for c in row] for row in rows]
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    fmt = "  ".join(f"{{:<{w}}}" if i < 3 else f"{{:>{w}}}" for i, w in enumerate(widths))
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
        "gunicorn": version("gunicorn"),
    }


HOW_TO_READ = """\
How to read it:

* **req/s**, **p50 ms**, **p99 ms** are medians over the rounds (rounds are
  interleaved: every cell runs once per round, so slow drift of a noisy
  machine spreads over all cells instead of hitting one). Latency is what
  wrk measures per request, from writing the request to the last response
  byte, over a keep-alive connection.
* **floor** is the median in-process `InferenceSession.run` time of the same
  model and input with the server's ONNX Runtime settings (1 intra-op and 1
  inter-op thread): what a request would cost with no server at all.
* **overhead p50 - floor** is what the server adds on top (HTTP, Django/DRF,
  decoding the request, encoding the response, copies). It is meaningful at
  concurrency 1; at concurrency 8 p50 also holds queueing (8 requests share
  the cores), so the difference there is mostly waiting, not work.
* With concurrency 1 the client waits for each answer, so req/s ≈ 1000 / mean
  latency. With concurrency 8 req/s shows the server's throughput on this
  machine; wrk runs on the same cores as the server and takes part of them.
* **errors**: non-200 responses (counted by the Lua `response` hook) plus
  socket errors and timeouts, summed over all rounds; a row with errors is
  marked ⚠ and its figures should not be trusted.
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
    aborted: str = "",
    appendix: str = "",
) -> None:
    multi = len(target_settings) > 1
    rows = [cell.row(multi) for cell in cells]
    info = machine_info()
    lines = [
        "# Benchmark results",
        "",
        f"Date: {time.strftime('%Y-%m-%d %H:%M:%S %Z', time.localtime(started))}",
        "",
        f"Command: `{command}`",
        "",
    ]
    if aborted:
        lines += [f"**The run was cut short: {aborted}**", ""]
    lines += ["## Machine", ""]
    lines += [f"* {key}: {value}" for key, value in info.items()]
    for name, settings in target_settings.items():
        lines += ["", f"## Server `{name}`", ""]
        lines += [f"* {key}: {value}" for key, value in settings.items()]
    lines += ["", "## Load", ""]
    lines += [f"* {key}: {value}" for key, value in load_settings.items()]
    lines += ["", "## Models", ""]
    lines += [f"* {text}" for text in models_text]
    lines += ["", "## Results", "", markdown_table(COLUMNS, rows), "", HOW_TO_READ]
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


def print_table(cells: list[Cell], multi_target: bool) -> None:
    print(text_table(COLUMNS, [cell.row(multi_target) for cell in cells]))
