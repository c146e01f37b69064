"""System shared memory against the binary tensor body, with Triton's own
Python clients (tritonclient HTTP and gRPC), 16 MiB FP32 inputs (not a
timed test).

Starts one ``serve`` (tests/support/server.py; in process, or with
``--workers`` one CPU worker on this machine over its Unix socket, which
reads and writes the regions itself) on two models: ``big`` (FP32 [1,
4194304], 16 MiB in, its mean out, 4 B; bench/shm.py) and ``echo`` (the
same input, Identity: 16 MiB out as well). For each protocol, model and
round it sends ``--requests`` requests one after another (concurrency 1)
with the tensors in the body (binary tensor data, ``binary_data=True``)
and as many naming a registered region instead (the input written there
once; the output of ``echo`` written back into a region), alternating
which goes first, and prints the medians over rounds of the per-cell
median latency, the throughput, their ratios, and the server's own
``compute_input`` / ``compute_output`` time per shared-memory request
(from ``/v2/models/<m>/stats``: reading the region into an array of ours,
writing the output into the region).

It also times, in this process, the one copy a region read costs
(``preadv`` of 16 MiB from a ``/dev/shm`` object into a new numpy array,
inference/shared_memory/region_io.py) against a ``memcpy`` of the same bytes out of a
mapping of it, and the ``pwrite`` of 16 MiB.

With ``--baseline DIR`` (another checkout, e.g. a git worktree of an
earlier commit; in process only) it runs the same cells against that
checkout's server too, interleaved, so that the cost of a change shows in
one run.

    .venv/bin/python bench/shm_clients.py [--rounds 5] [--requests 20] [--workers] [--baseline DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import mmap
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import tritonclient.grpc as grpcclient  # noqa: E402
import tritonclient.http as httpclient  # noqa: E402
import tritonclient.utils.shared_memory as shm  # noqa: E402
from onnx import TensorProto, helper  # noqa: E402

from bench.shm import BIG_ELEMENTS, build_big  # noqa: E402
from tests.support import server as live_server  # noqa: E402
from tests.support.server import LiveServer  # noqa: E402

SHAPE = [1, BIG_ELEMENTS]
NBYTES = BIG_ELEMENTS * 4
#: model -> (output shape, whether the output goes into a region in the shared-memory cells)
MODELS = {"big": ([1, 1], False), "echo": (SHAPE, True)}


def build_echo() -> bytes:
    """x FP32 [1, 4194304] -> y, the same (Identity)."""
    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"])],
        "echo",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, SHAPE)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, SHAPE)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="bench")
    model.ir_version = 8
    return model.SerializeToString()


def median_ms(function, times: int = 15) -> float:
    taken = []
    for _ in range(times):
        started = time.perf_counter()
        function()
        taken.append(time.perf_counter() - started)
    return statistics.median(taken) * 1e3


def copy_costs() -> dict[str, float]:
    """Medians (ms) of moving 16 MiB between a /dev/shm object and arrays of this process."""
    from inference.shared_memory.region_io import ObjectFile, read_into, write_from

    path = Path("/dev/shm") / f"mh-bench-copy-{uuid.uuid4().hex[:8]}"
    data = np.random.default_rng(0).random(BIG_ELEMENTS, dtype=np.float32)
    path.write_bytes(data.tobytes())
    try:
        file = ObjectFile(path, "/" + path.name)
        mapped = mmap.mmap(file.fd, NBYTES)
        into = np.empty(BIG_ELEMENTS, np.float32)

        def fresh_read():
            array = np.empty(BIG_ELEMENTS, np.float32)
            read_into(file, 0, array, "bench")

        costs = {
            "preadv into a new array (what a region read does)": median_ms(fresh_read),
            "preadv into an array already touched": median_ms(lambda: read_into(file, 0, into, "bench")),
            "memcpy out of a mapping (the same bytes, for reference)": median_ms(
                lambda: np.copyto(into, np.frombuffer(mapped, np.float32))
            ),
            "pwrite of 16 MiB (an output written into a region)": median_ms(lambda: write_from(file, 0, into, "b")),
        }
        np.testing.assert_array_equal(into, data)
        mapped.close()
        return costs
    finally:
        path.unlink()


def stats(client, model: str) -> tuple[int, int, int]:
    """(success count, compute_input ns, compute_output ns) of a model, every server process."""
    entry = client.get_inference_statistics(model)["model_stats"][0]["inference_stats"]
    return entry["success"]["count"], entry["compute_input"]["ns"], entry["compute_output"]["ns"]


class Cell:
    """One way of sending one model's requests over one protocol."""

    def __init__(self, server: LiveServer, protocol: str, model: str, shared: bool, regions: dict, admin):
        self.admin = admin  # an HTTP client for the statistics
        self.module = httpclient if protocol == "http" else grpcclient
        url = server.http_url if protocol == "http" else server.grpc_url
        self.client = self.module.InferenceServerClient(url)
        self.model, self.shared = model, shared
        out_shape, out_in_region = MODELS[model]
        self.inputs = [self.module.InferInput("x", SHAPE, "FP32")]
        self.outputs = [self.module.InferRequestedOutput("y", **({"binary_data": True} if protocol == "http" else {}))]
        if shared:
            self.inputs[0].set_shared_memory(regions["in"], NBYTES)
            if out_in_region:
                self.outputs[0].set_shared_memory(regions["out"], NBYTES)
        else:
            self.inputs[0].set_data_from_numpy(regions["data"], **({"binary_data": True} if protocol == "http" else {}))
        self.out_shape = out_shape

    def run(self, requests: int) -> tuple[float, float, float, float]:
        """(median ms, requests per second, server compute_input ms, compute_output ms per request)."""
        before = stats(self.admin, self.model)
        taken = []
        started = time.perf_counter()
        for _ in range(requests):
            t0 = time.perf_counter()
            result = self.client.infer(self.model, self.inputs, outputs=self.outputs)
            taken.append(time.perf_counter() - t0)
        elapsed = time.perf_counter() - started
        if not self.shared or not MODELS[self.model][1]:
            assert list(result.as_numpy("y").shape) == self.out_shape
        after = stats(self.admin, self.model)
        count = max(1, after[0] - before[0])
        return (
            statistics.median(taken) * 1e3,
            requests / elapsed,
            (after[1] - before[1]) / count / 1e6,
            (after[2] - before[2]) / count / 1e6,
        )


@contextlib.contextmanager
def started(root: Path, repository: Path, var: Path, args):
    """A started LiveServer of the checkout at ``root`` (this one, or a baseline's)."""
    env, devices = {"MAX_REQUEST_BYTES": str(64 * 1024 * 1024)}, ()
    if args.workers:
        import redis

        redis.Redis.from_url(args.redis).flushdb()
        env.update(INFERENCE_EXECUTOR="workers", REDIS_URL=args.redis)
        devices = ("cpu",)
    server = LiveServer(repository, var, extra_env=env, devices=devices)
    previous, live_server.ROOT = live_server.ROOT, root  # where its manage.py runs
    try:
        server.start()
        if devices:
            server.wait_for_workers()
    finally:
        live_server.ROOT = previous
    try:
        yield server
    finally:
        server.stop()


def cells_of(server: LiveServer, handles: list, tag: str, data: np.ndarray) -> dict:
    """The server's cells by (protocol, model, shared), the regions registered and warmed up."""
    admin = httpclient.InferenceServerClient(server.http_url)
    for way in ("in", "out"):
        admin.register_system_shared_memory(f"{way}-{tag}", f"/mh-bench-{way}-{tag}", NBYTES)
    regions = {"in": f"in-{tag}", "out": f"out-{tag}", "data": data}
    cells = {}
    for protocol in ("http", "grpc"):
        for model in MODELS:
            for shared in (False, True):
                cells[(protocol, model, shared)] = cell = Cell(server, protocol, model, shared, regions, admin)
                cell.run(3)  # warm-up: every process has loaded the model, both ways
    np.testing.assert_array_equal(shm.get_contents_as_numpy(handles[1], np.float32, SHAPE), data)  # echoed
    shm.set_shared_memory_region(handles[1], [np.zeros_like(data)])
    return cells


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--requests", type=int, default=20, help="requests per cell and round")
    parser.add_argument("--workers", action="store_true", help="worker mode: one CPU worker on this machine")
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/12", help="Redis of --workers (flushed)")
    parser.add_argument("--baseline", type=Path, help="another checkout (e.g. a git worktree of an earlier commit)")
    args = parser.parse_args()
    if args.baseline and args.workers:
        parser.error("--baseline runs in process only (one Redis database for the workers)")
    print("one copy, 16 MiB, in this process (median of 15, ms):")
    for what, ms in copy_costs().items():
        print(f"  {what:58}: {ms:6.2f}")
    data = np.random.default_rng(1).random(SHAPE, dtype=np.float32)
    roots = {"this": ROOT, **({"baseline": args.baseline.resolve()} if args.baseline else {})}
    tag = uuid.uuid4().hex[:8]
    results: dict[tuple, list] = {}
    with tempfile.TemporaryDirectory(prefix="shm-clients-bench-") as work, contextlib.ExitStack() as stack:
        work = Path(work)
        repository = work / "repository"
        for name, payload in (("big", build_big()), ("echo", build_echo())):
            (repository / name / "1").mkdir(parents=True)
            (repository / name / "1" / "model.onnx").write_bytes(payload)
        handles = [shm.create_shared_memory_region(f"{w}-{tag}", f"/mh-bench-{w}-{tag}", NBYTES) for w in ("in", "out")]
        stack.callback(lambda: [shm.destroy_shared_memory_region(h) for h in handles])
        shm.set_shared_memory_region(handles[0], [data])
        cells = {}
        for name, root in roots.items():
            server = stack.enter_context(started(root, repository, work / f"var-{name}", args))
            for key, cell in cells_of(server, handles, tag, data).items():
                cells[(name, *key)] = cell
        for round_ in range(args.rounds):
            for name in roots if round_ % 2 == 0 else reversed(roots):
                for protocol in ("http", "grpc"):
                    for model in MODELS:
                        for shared in (False, True) if round_ % 2 == 0 else (True, False):
                            result = cells[(name, protocol, model, shared)].run(args.requests)
                            results.setdefault((name, protocol, model, shared), []).append(result)
            print(f"round {round_ + 1} of {args.rounds} done")
    mode = "worker mode (a CPU worker on this machine)" if args.workers else "in process"
    print(f"\nmedians over {args.rounds} rounds of {args.requests} requests, concurrency 1, {mode}:")
    print(
        "| server | protocol | model | body p50 ms | shm p50 ms | p50 ratio | body req/s | shm req/s | req/s ratio "
        "| shm input ms | shm output ms |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for name in roots:
        for protocol in ("http", "grpc"):
            for model in MODELS:
                body = [statistics.median(r[i] for r in results[(name, protocol, model, False)]) for i in range(4)]
                shared = [statistics.median(r[i] for r in results[(name, protocol, model, True)]) for i in range(4)]
                print(
                    f"| {name} | {protocol} | {model} | {body[0]:.2f} | {shared[0]:.2f} | {shared[0] / body[0]:.3f}x "
                    f"| {body[1]:.1f} | {shared[1]:.1f} | {shared[1] / body[1]:.1f}x "
                    f"| {shared[2]:.2f} | {shared[3]:.2f} |"
                )


if __name__ == "__main__":
    main()
