"""Ten thousand models on one machine (issue 39, item 2).

Registers N tiny models (model i: ``x`` FP32 [1, 16] -> ``y = 2x + i``; one
version each, READY) straight into the registry (bulk inserts, each model's
own file in the store) in a fresh SQLite database under a
temporary VAR_DIR, or the PostgreSQL database of ``--database-url`` (created
when missing, emptied first), then starts ``manage.py serve`` (REST and gRPC,
the server's default processes, inference in process) twice: once on the
empty registry and once with the N models, and reports:

- time to ready: from spawning ``serve`` until ``GET /v2/health/ready``
  answers 200 (both transports listen, every process has the registry);
- memory: the RSS of each serving process at ready, and the growth per
  registered model per process against the empty registry's processes;
- the first request to a model no process has loaded (its session loads
  inside the request), the next request to it, and RSS after them; the
  answers are checked against numpy (``2x + i``);
- what another model's registry write costs a request: a version label
  set through the management API, then requests to another model (the
  slowest of each round: the process that follows the change first);
- list latencies, median of ``--repeat``: ``POST /v2/repository/index``
  (every version, what tritonclient asks), the management API's model list
  (a page, ``limit`` at its cap, a deep page by ``offset`` and by the keyset
  ``after`` cursor, a filter), one model's versions, and the web UI's list.

On PostgreSQL the bulk-inserted tables are ANALYZEd before ``serve`` starts
(a live database's autovacuum keeps the planner's statistics; without them
a filtered list's plan scans every version: 50 ms instead of 18 at 10,000).

Usage: ``.venv/bin/python bench/ten_thousand.py [--models 10000]
[--repeat 20] [--database-url postgres://postgres@127.0.0.1:5432/bench10k]``;
prints a Markdown table. About a minute on SQLite at 10,000 models.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from onnx import TensorProto, helper  # noqa: E402

from tests.support.rss import process_tree, status_kib  # noqa: E402
from tests.support.server import free_port, http_ok, port_open  # noqa: E402


def _create_database(url: str) -> None:
    """Create the PostgreSQL database of ``url`` when it does not exist."""
    import psycopg

    parts = urllib.parse.urlsplit(url)
    name = parts.path.lstrip("/")
    admin = urllib.parse.urlunsplit(parts._replace(path="/postgres"))
    with psycopg.connect(admin, autocommit=True) as connection:
        if connection.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone() is None:
            connection.execute(f'CREATE DATABASE "{name}"')


def _setup(var_dir: Path, database_url: str | None) -> None:
    os.environ["VAR_DIR"] = str(var_dir)
    os.environ.pop("DATABASE_URL", None)
    if database_url:
        _create_database(database_url)
        os.environ["DATABASE_URL"] = database_url
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "hosting.settings")
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    if database_url:
        call_command("flush", interactive=False, verbosity=0)


_SENTINEL = 12345.5  # the offset of the template model, its four bytes replaced per model


def _template() -> bytes:
    graph = helper.make_graph(
        [helper.make_node("Mul", ["x", "scale"], ["t"]), helper.make_node("Add", ["t", "offset"], ["y"])],
        "tiny",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16])],
        [
            helper.make_tensor("scale", TensorProto.FLOAT, [], [2.0]),
            helper.make_tensor("offset", TensorProto.FLOAT, [], [_SENTINEL]),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


def tiny(offset: float, template: bytes | None = None) -> bytes:
    """x FP32 [1, 16] -> y = 2x + ``offset`` (each model its own file and sha256): the template's offset replaced."""
    template = template or _template()
    sentinel = struct.pack("<f", _SENTINEL)
    assert template.count(sentinel) == 1
    return template.replace(sentinel, struct.pack("<f", offset))


def seed(count: int) -> float:
    """``count`` models ``m00000``... (model i: ``y = 2x + i``) with one READY
    version each; returns the seconds it took."""
    from django.conf import settings
    from django.db import connection, transaction

    from models_store.registry.models import ModelVersion, RegisteredModel
    from models_store.stamp import bump_stamp

    started = time.perf_counter()
    store = Path(settings.MODEL_STORE_DIR)
    names = [f"m{i:05d}" for i in range(count)]
    files = {}
    template = _template()
    for i, name in enumerate(names):  # the store's layout: <model>/<sha256>/model.onnx
        payload = tiny(float(i), template)
        sha = hashlib.sha256(payload).hexdigest()
        folder = store / name / sha
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "model.onnx").write_bytes(payload)
        files[name] = (sha, len(payload))
    signature = {
        "inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 16]}],
        "outputs": [{"name": "y", "datatype": "FP32", "shape": [1, 16]}],
    }
    with transaction.atomic():
        models = RegisteredModel.objects.bulk_create(
            (RegisteredModel(name=name, description="tiny", last_version_number=1) for name in names),
            batch_size=2000,
        )
        ModelVersion.objects.bulk_create(
            (
                ModelVersion(
                    model=model, number=1, artifact=f"{model.name}/{files[model.name][0]}/model.onnx",
                    sha256=files[model.name][0], size=files[model.name][1], state=ModelVersion.State.READY,
                    **signature,
                )
                for model in models
            ),
            batch_size=2000,
        )  # fmt: skip
        bump_stamp()
    if connection.vendor == "postgresql":  # the planner's statistics, as autovacuum keeps them on a live database
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE")
    return time.perf_counter() - started


def _token() -> str:
    from models_store.accounts import services as accounts

    user = accounts.user_create(username="bench", password="Bench-password-123", superuser=True)
    return accounts.token_create(user=user, name="bench")[1]


class Server:
    """``manage.py serve`` on free ports with the bench's VAR_DIR and database."""

    def __init__(self, var_dir: Path, database_url: str | None, extra_env: dict | None = None, root: Path = ROOT):
        self.root = root
        self.http_port, self.grpc_port = free_port(), free_port()
        self.env = dict(os.environ, VAR_DIR=str(var_dir), ORT_INTRA_OP_THREADS="1", ORT_INTER_OP_THREADS="1")
        self.env.pop("DATABASE_URL", None)
        if database_url:
            self.env["DATABASE_URL"] = database_url
        self.env.update(extra_env or {})
        self.log = var_dir / f"serve-{self.http_port}.log"
        self.process: subprocess.Popen | None = None
        self.base = f"http://127.0.0.1:{self.http_port}"

    def start(self, timeout: float = 600) -> float:
        """Spawn and wait until ready; returns the seconds from spawn to ready."""
        command = [
            sys.executable, "manage.py", "serve", "--http-port", str(self.http_port),
            "--grpc-port", str(self.grpc_port),
        ]  # fmt: skip
        started = time.perf_counter()
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen(
                command, cwd=self.root, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        while time.perf_counter() - started < timeout:
            if self.process.poll() is not None:
                raise RuntimeError(f"serve exited early:\n{self.log.read_text()[-3000:]}")
            if http_ok(self.base + "/v2/health/ready", timeout=5) and port_open(self.grpc_port):
                return time.perf_counter() - started
            time.sleep(0.05)
        raise RuntimeError(f"serve was not ready after {timeout} s:\n{self.log.read_text()[-3000:]}")

    def serving_pids(self) -> list[int]:
        """The processes that serve: the leaves of serve's process tree (granian's workers, the gRPC
        server processes), not the supervisors."""
        tree = process_tree(self.process.pid)
        parents = set()
        for pid in tree:
            try:
                parents.add(int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1]))
            except (OSError, ValueError):
                continue
        return [pid for pid in tree if pid not in parents]

    def serving_rss_kib(self) -> list[int]:
        """VmRSS (KiB) of each serving process."""
        return sorted(status_kib(pid, "VmRSS") for pid in self.serving_pids())

    def serving_cpu_seconds(self) -> list[float]:
        """CPU time (user + system) each serving process has used (less sensitive than wall time to a busy machine)."""
        ticks = os.sysconf("SC_CLK_TCK")
        out = []
        for pid in self.serving_pids():
            try:
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            out.append((int(fields[11]) + int(fields[12])) / ticks)
        return sorted(out)

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()


def _call(method: str, url: str, body: bytes | None = None, headers: dict | None = None) -> tuple[int, bytes]:
    request = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def _median_ms(call, repeat: int) -> float:
    call()  # warm: connections, templates, caches
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        status, body = call()
        times.append((time.perf_counter() - started) * 1000)
        assert status == 200, body[:300]
    return statistics.median(times)


def _infer(base: str, name: str, x: np.ndarray) -> tuple[float, np.ndarray]:
    body = json.dumps({"inputs": [{"name": "x", "shape": [1, 16], "datatype": "FP32", "data": x.ravel().tolist()}]})
    started = time.perf_counter()
    status, answer = _call(
        "POST", f"{base}/v2/models/{name}/infer", body.encode(), {"Content-Type": "application/json"}
    )
    seconds = time.perf_counter() - started
    assert status == 200, answer[:300]
    output = json.loads(answer)["outputs"][0]
    return seconds, np.asarray(output["data"], dtype=np.float32).reshape(output["shape"])


def measure(server: Server, count: int, token: str, repeat: int, first: int) -> dict:
    rows: dict[str, str] = {}
    rss = server.serving_rss_kib()
    rows["serving processes"] = str(len(rss))
    rows["CPU seconds per serving process at ready"] = ", ".join(f"{c:.1f}" for c in server.serving_cpu_seconds())
    rows["RSS per serving process at ready (MiB)"] = ", ".join(f"{kib / 1024:.0f}" for kib in rss)
    rows["_rss"] = rss
    if not count:
        return rows
    rng = np.random.default_rng(39)
    picks = [int(i) for i in rng.choice(count, size=first, replace=False)]
    firsts, seconds = [], []
    for i in picks:
        x = rng.standard_normal((1, 16)).astype(np.float32)
        took, y = _infer(server.base, f"m{i:05d}", x)
        np.testing.assert_allclose(y, 2 * x + np.float32(i), rtol=1e-6)
        firsts.append(took * 1000)
        took, y = _infer(server.base, f"m{i:05d}", x)
        np.testing.assert_allclose(y, 2 * x + np.float32(i), rtol=1e-6)
        seconds.append(took * 1000)
    rows["first request to an unloaded model, ms (median; max)"] = (
        f"{statistics.median(firsts):.1f}; {max(firsts):.1f} (of {first})"
    )
    rows["the next request to it, ms (median)"] = f"{statistics.median(seconds):.2f}"
    auth = {"Authorization": f"Bearer {token}"}
    index = f"{server.base}/v2/repository/index"
    api = f"{server.base}/api/models/"
    cells = [
        ("POST /v2/repository/index (every version)", lambda: _call("POST", index, b"{}")),
        ('POST /v2/repository/index {"ready": true}', lambda: _call("POST", index, b'{"ready": true}')),
        ("GET /api/models/ (a page: 50)", lambda: _call("GET", api, headers=auth)),
        ("GET /api/models/?limit=1000 (the cap)", lambda: _call("GET", api + "?limit=1000", headers=auth)),
        (
            f"GET /api/models/?offset={count - 60} (a deep page)",
            lambda: _call("GET", api + f"?offset={count - 60}", headers=auth),
        ),
        (
            f"GET /api/models/?after=m{count - 60:05d} (keyset)",
            lambda: _call("GET", api + f"?after=m{count - 60:05d}", headers=auth),
        ),
        (
            "GET /api/models/?name=m0999&state=READY",
            lambda: _call("GET", api + "?name=m0999&state=READY", headers=auth),
        ),
        ("GET /api/models/?order=-updated", lambda: _call("GET", api + "?order=-updated", headers=auth)),
        ("GET /api/models/m00042/versions/", lambda: _call("GET", api + "m00042/versions/", headers=auth)),
    ]
    for label, call in cells:
        try:
            rows[f"{label}, ms"] = f"{_median_ms(call, repeat):.1f}"
        except AssertionError as exc:
            rows[f"{label}, ms"] = f"refused ({str(exc)[:60]})"
    size = len(_call("POST", index, b"{}")[1])
    rows["repository index size (KB)"] = f"{size / 1000:.0f}"
    rows.update(_after_writes(server, auth, rng))
    after = server.serving_rss_kib()
    rows[f"RSS per serving process after {first} first requests (MiB)"] = ", ".join(f"{k / 1024:.0f}" for k in after)
    return rows


def _after_writes(server: Server, auth: dict, rng, writes: int = 5, requests: int = 6) -> dict[str, str]:
    """What another team's registry write costs a request: ``writes`` times,
    a version label set on ``m00002`` through the management API, then
    ``requests`` inference requests to ``m00001`` (they spread over the HTTP
    processes, each of which follows the change before its first lookup
    after it); the slowest of each round, in ms."""
    x = rng.standard_normal((1, 16)).astype(np.float32)
    for _ in range(10):
        _infer(server.base, "m00001", x)  # every process has it loaded
    headers = {**auth, "Content-Type": "application/json"}
    slowest, took = [], []
    for i in range(writes):
        started = time.perf_counter()
        status, body = _call("PUT", f"{server.base}/api/models/m00002/labels/w{i}/", b'{"version": 1}', headers)
        took.append((time.perf_counter() - started) * 1000)
        assert status == 200, body[:300]
        answers = [_infer(server.base, "m00001", x) for _ in range(requests)]
        for _seconds, y in answers:
            np.testing.assert_allclose(y, 2 * x + np.float32(1), rtol=1e-6)
        slowest.append(max(seconds for seconds, _y in answers) * 1000)
        time.sleep(1)
    return {
        "a label set on another model (management API), ms (median)": f"{statistics.median(took):.0f}",
        f"the slowest of the next {requests} requests after it, ms (median; max of {writes})": (
            f"{statistics.median(slowest):.1f}; {max(slowest):.1f}"
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", type=int, default=10000)
    parser.add_argument("--repeat", type=int, default=20, help="requests per list latency (median)")
    parser.add_argument("--first", type=int, default=10, help="models asked once each for the first-request wait")
    parser.add_argument("--database-url", default=None, help="PostgreSQL (else SQLite under a temporary VAR_DIR)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary VAR_DIR")
    parser.add_argument(
        "--root", type=Path, default=ROOT, help="the checkout whose serve runs (e.g. a worktree of an earlier commit)"
    )
    args = parser.parse_args()
    var_dir = Path(tempfile.mkdtemp(prefix="bench-10k-"))
    try:
        _setup(var_dir, args.database_url)
        token = _token()
        from django.db import connections

        connections.close_all()
        empty = Server(var_dir, args.database_url, root=args.root)
        try:
            empty_ready = empty.start()
            empty_rows = measure(empty, 0, token, args.repeat, args.first)
        finally:
            empty.stop()
        seeded = seed(args.models)
        connections.close_all()
        full = Server(var_dir, args.database_url, root=args.root)
        try:
            full_ready = full.start()
            rows = measure(full, args.models, token, args.repeat, args.first)
        finally:
            full.stop()
        _report(args, seeded, empty_ready, empty_rows, full_ready, rows)
    finally:
        if not args.keep:
            shutil.rmtree(var_dir, ignore_errors=True)


def _report(args, seeded: float, empty_ready: float, empty_rows: dict, full_ready: float, rows: dict) -> None:
    where = "PostgreSQL" if args.database_url else "SQLite"
    grown = [(a - b) / args.models for a, b in zip(rows.pop("_rss"), empty_rows.pop("_rss"), strict=False)]
    commit = subprocess.run(["git", "describe", "--always", "--dirty"], cwd=args.root, capture_output=True, text=True)
    print(
        f"{args.models} tiny models on {where}, serve of {commit.stdout.strip()}; lists: median of {args.repeat}; "
        f"load average at the end {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs\n"
    )
    print("| measure | value |\n|---|---:|")
    print(f"| registering {args.models} models (bulk insert + files), s | {seeded:.1f} |")
    print(f"| serve: time to ready, empty registry, s | {empty_ready:.1f} |")
    print(f"| serve: time to ready, {args.models} models, s | {full_ready:.1f} |")
    print(f"| RSS per serving process, empty registry (MiB) | {empty_rows['RSS per serving process at ready (MiB)']} |")
    empty_cpu = empty_rows["CPU seconds per serving process at ready"]
    print(f"| CPU seconds per serving process at ready, empty registry | {empty_cpu} |")
    for key, value in rows.items():
        print(f"| {key} | {value} |")
    print(f"| RSS per registered model per process (KB) | {', '.join(f'{g * 1.024:.1f}' for g in grown)} |", flush=True)


if __name__ == "__main__":
    main()
