"""Where bench/run.py writes its results: bench/RESULTS.md keeps the latest
full run; a quick, narrowed or named one goes elsewhere."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import run


@pytest.mark.parametrize(
    ("argv", "written"),
    [
        ([], run.RESULTS),
        (["--rounds", "5"], run.RESULTS),
        (["--quick"], run.WORK / "RESULTS-quick.md"),
        (["--only", "cnn/grpc"], run.WORK / "RESULTS-narrowed.md"),
        (["--no-peers"], run.WORK / "RESULTS-narrowed.md"),
        (["--no-minilm"], run.WORK / "RESULTS-narrowed.md"),
        (["--servers", "serve,serve-workers"], run.WORK / "RESULTS-narrowed.md"),
        (["--only", "cnn", "--results", "/tmp/mine.md"], Path("/tmp/mine.md")),
    ],
)
def test_only_a_full_run_writes_bench_results(argv, written):
    assert run.parse_args(argv).results == written
    assert run.RESULTS == Path(run.__file__).resolve().parent / "RESULTS.md"
