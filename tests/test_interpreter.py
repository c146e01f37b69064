"""The interpreter ``make venv`` builds .venv from (scripts/pick_python.sh, the Makefile's
PYTHON): a CPython 3.11 that can make a venv, Debian's optimised build where it has venv
(bench/README.md, "The interpreter"), and the venv is rebuilt when that choice changes."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DEBIAN = Path("/usr/bin/python3.11")


def _pick() -> str:
    return subprocess.run([ROOT / "scripts" / "pick_python.sh"], capture_output=True, text=True, check=True).stdout


def _has_venv(python: str | Path) -> bool:
    return subprocess.run([python, "-c", "import ensurepip, venv"], capture_output=True).returncode == 0


def test_the_pick_is_a_cpython_3_11_that_makes_venvs():
    python = _pick().strip()
    version = subprocess.run(
        [python, "-c", "import sys, platform; print(platform.python_implementation(), *sys.version_info[:2])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert version == ["CPython", "3", "11"]
    assert _has_venv(python)


@pytest.mark.skipif(not (DEBIAN.exists() and _has_venv(DEBIAN)), reason="no Debian python3.11 with venv here")
def test_debians_python_is_picked_where_it_has_venv():
    assert _pick() == f"{DEBIAN}\n"


def test_a_venv_from_another_interpreter_is_rebuilt(tmp_path):
    """The Makefile's ``$(VENV)/.interpreter`` rule: a venv whose stamp names another
    interpreter is removed and the stamp rewritten; with the same interpreter it is kept."""
    venv = tmp_path / "venv"
    venv.mkdir()
    (venv / "marker").write_text("built by another interpreter")
    (venv / ".interpreter").write_text("/nonexistent/python3.11\n")
    python = _pick().strip()
    make = ["make", "--no-print-directory", "-C", str(ROOT), f"VENV={venv}", f"PYTHON={python}"]
    subprocess.run([*make, f"{venv}/.interpreter"], check=True, capture_output=True)
    assert not (venv / "marker").exists()
    assert (venv / ".interpreter").read_text() == f"{os.path.realpath(python)}\n"
    (venv / "marker").write_text("kept")
    subprocess.run([*make, f"{venv}/.interpreter"], check=True, capture_output=True)
    assert (venv / "marker").read_text() == "kept"
