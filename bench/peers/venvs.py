"""The peers' virtualenvs under bench/work/peers/<name>-venv, built once from
PyPI with pinned versions and reused while their specification is unchanged
(a marker file records it). Building one takes a minute or two."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

PY_VERSION = f"{sys.version_info.major}.{sys.version_info.minor}"


def base_python() -> str:
    """The interpreter this venv was made from (the peers' venvs use the same Python)."""
    base = getattr(sys, "_base_executable", "") or ""
    if base and Path(base).exists() and Path(base).resolve() != Path(sys.executable).resolve():
        return base
    candidate = Path(sys.base_prefix) / "bin" / f"python{PY_VERSION}"
    return str(candidate) if candidate.exists() else sys.executable


def our_onnxruntime() -> str:
    """The peers run the same ONNX Runtime version as this server."""
    return metadata.version("onnxruntime")


@dataclass
class PeerVenv:
    name: str
    requirements: list[str]
    root: Path  # bench/work/peers
    post_install: Callable[[PeerVenv], None] | None = field(default=None, repr=False)

    @property
    def path(self) -> Path:
        return self.root / f"{self.name}-venv"

    @property
    def python(self) -> Path:
        return self.path / "bin" / "python"

    @property
    def site_packages(self) -> Path:
        return self.path / "lib" / f"python{PY_VERSION}" / "site-packages"

    @property
    def log_path(self) -> Path:
        return self.root / f"{self.name}-install.log"

    @property
    def marker(self) -> Path:
        return self.path / ".bench-spec.json"

    def spec(self) -> str:
        return json.dumps({"python": base_python(), "requirements": self.requirements}, sort_keys=True)

    def ready(self) -> bool:
        return self.marker.exists() and self.marker.read_text() == self.spec()

    def ensure(self) -> None:
        """Build the virtualenv unless an identical one is there; raises RuntimeError on failure."""
        if self.ready():
            return
        print(f"  building {self.path} ({' '.join(self.requirements)}); once, takes minutes; log: {self.log_path}")
        if self.path.exists():
            shutil.rmtree(self.path)
        self.root.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "w") as log:
            for command in (
                [base_python(), "-m", "venv", str(self.path)],
                [str(self.python), "-m", "pip", "install", "--disable-pip-version-check", *self.requirements],
            ):
                log.write(f"$ {' '.join(command)}\n")
                log.flush()
                done = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT)
                if done.returncode != 0:
                    raise RuntimeError(f"building the {self.name} virtualenv failed: see {self.log_path}")
        if self.post_install is not None:
            self.post_install(self)
        self.marker.write_text(self.spec())

    def version(self, dist: str) -> str:
        """A distribution's version inside this virtualenv."""
        code = f"from importlib.metadata import version; print(version({dist!r}))"
        out = subprocess.run([str(self.python), "-c", code], capture_output=True, text=True)
        return out.stdout.strip() or "unknown"
