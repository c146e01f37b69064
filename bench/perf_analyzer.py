"""Triton's perf_analyzer as a load generator, for what h2load and wrk
cannot drive: gRPC bidirectional streaming (``--streaming``: each of the N
concurrent clients keeps one ``ModelStreamInfer`` stream open and sends its
requests on it, one in flight at a time).

The binary is the one ``make test-tools`` installs (``.venv/tools/perf_analyzer``,
from the tritonclient 2.41.0 wheel). A cell runs three measurement windows of
a third of the cell's seconds each (``--measurement-mode time_windows``,
stability not required: ``-s 999``) with zero-filled inputs of the request's
shapes (``--input-data zero``), and reports perf_analyzer's client-side
throughput and latency percentiles of those windows. perf_analyzer exits
non-zero when a request fails, so a cell with errors raises.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from bench.loads import Loader, LoadResult
from bench.workloads import PA_MODEL as MODEL
from bench.workloads import PA_SHAPE as SHAPE
from bench.workloads import Request

ROOT = Path(__file__).resolve().parents[1]
BINARY = ROOT / ".venv" / "tools" / "perf_analyzer"
INSTALL = "make test-tools (scripts/install_perf_analyzer.sh)"
VERSION = "tritonclient 2.41.0 wheel"


class PerfAnalyzerLoader(Loader):
    """perf_analyzer -m <model> -u <grpc address> -i grpc <extra> --concurrency-range N:N ..."""

    name = "perf_analyzer"

    def __init__(self, work_dir: Path, extra: tuple[str, ...] = ("--streaming",), binary: Path = BINARY):
        self.work_dir = work_dir
        self.extra = extra
        self.binary = binary
        self.last_output = ""

    def available(self) -> str | None:
        if not self.binary.exists():
            return f"perf_analyzer is not installed; install it with: {INSTALL}"
        return None

    def version(self) -> str:
        return VERSION

    def command(self, address: str, request: Request, concurrency: int, seconds: float) -> list[str]:
        window_ms = max(200, round(seconds * 1000 / 3))
        shapes = [f"{key[len(SHAPE) :]}:{value}" for key, value in request.headers.items() if key.startswith(SHAPE)]
        return [
            str(self.binary), "-m", request.headers[MODEL], "-u", address, "-i", "grpc", *self.extra,
            "--concurrency-range", f"{concurrency}:{concurrency}", "--measurement-mode", "time_windows",
            "--measurement-interval", str(window_ms), "--max-trials", "3", "--stability-percentage", "999",
            "--input-data", "zero", *[arg for shape in shapes for arg in ("--shape", shape)],
        ]  # fmt: skip

    def run(self, base_url: str, request: Request, concurrency: int, seconds: float) -> LoadResult:
        address = base_url.removeprefix("http://")
        command = self.command(address, request, concurrency, seconds)
        out = subprocess.run(command, capture_output=True, text=True, timeout=seconds * 4 + 120)
        self.last_output = out.stdout + out.stderr
        if out.returncode != 0:
            shown = " ".join(command)
            raise RuntimeError(f"perf_analyzer failed (status {out.returncode}): {shown}\n{self.last_output}")
        return parse(out.stdout, seconds)


def _number(pattern: str, text: str) -> float:
    found = re.search(pattern, text)
    if found is None:
        raise RuntimeError(f"perf_analyzer's output has no {pattern!r}:\n{text}")
    return float(found.group(1))


def parse(text: str, seconds: float) -> LoadResult:
    """A LoadResult from perf_analyzer's report (its client-side section:
    the measured windows' request count, throughput, latencies in usec)."""
    client = text[text.index("Client:") :] if "Client:" in text else text
    count = int(_number(r"Request count: (\d+)", client))
    throughput = _number(r"Throughput: ([\d.]+) infer/sec", client)
    return LoadResult(
        requests=count,
        seconds=count / throughput if throughput > 0 else seconds,
        p50_ms=_number(r"p50 latency: (\d+) usec", client) / 1e3,
        p99_ms=_number(r"p99 latency: (\d+) usec", client) / 1e3,
        mean_ms=_number(r"Avg latency: (\d+) usec", client) / 1e3,
        non200=0,
        socket_errors=0,
    )
