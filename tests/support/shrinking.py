"""A client that shrinks its own shared-memory region while it infers from
it, as a live server must survive it (Triton's system shared-memory
extension, driven with tritonclient over HTTP and gRPC and
``tritonclient.utils.shared_memory``).

:func:`shrink_while_inferring` registers a 16 MiB region, puts an input
of 1 MiB at 1 MiB into it and asks for the outputs in it too (one span per
inferring thread); a shrinker thread truncates the object to 4 KiB and back
and writes the input again, in a tight loop, while several threads infer
from the region over HTTP and gRPC and another caller sends its tensors in
the request body. It records what every answer was; the tests assert on it.

The client's own truncation zeroes the object past 4 KiB until the
shrinker writes the input back (POSIX: the bytes a truncation removed read
back as zeros), so a request may legitimately read zeros where the values
were: an answer is correct when every element is the model of the value
there or of 0, and the input's values are drawn from [1, 2) so that
nothing else (a wrong offset, memory that was never read) can pass.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm
from tritonclient.utils import InferenceServerException

from tests.support.server import LiveServer

REGION_BYTES = 16 << 20
SHRUNK_BYTES = 4096
INPUT_OFFSET = 1 << 20
OUTPUT_OFFSET = 4 << 20  # thread i's output at OUTPUT_OFFSET + i MiB
THREADS = ("http", "grpc", "http")
REFUSED = ("400", "StatusCode.INVALID_ARGUMENT")


@dataclass
class Model:
    """The model driven: ``name``, its FP32 input and output names, the
    input's shape in the region (1 MiB), what it computes (numpy,
    element-wise) and the shape the other caller sends in the body."""

    name: str
    input: str
    output: str
    shape: tuple[int, ...]
    compute: Callable[[np.ndarray], np.ndarray]
    body_shape: tuple[int, ...]


@dataclass
class ShrinkRun:
    """What the clients saw: ``whole`` answers exactly right (every element
    from the values), ``zeroed`` answers right where some elements were the
    model of the zeros a truncation left, ``refused`` 400/INVALID_ARGUMENT
    messages, ``other`` the other caller's exact answers, ``failures``
    everything else (a wrong value, a 5xx, a refused connection)."""

    key: str
    name: str
    whole: int = 0
    zeroed: int = 0
    refused: list[str] = field(default_factory=list)
    other: int = 0
    failures: list[str] = field(default_factory=list)


def _check(values: np.ndarray, model: Model, got: np.ndarray) -> str:
    """'whole', 'zeroed', or what is wrong with ``got``."""
    expected, of_zero = model.compute(values), model.compute(np.zeros_like(values))
    if got.shape != expected.shape:
        return f"shape {got.shape}, expected {expected.shape}"
    if np.array_equal(got, expected):
        return "whole"
    wrong = ~((got == expected) | (got == of_zero))
    if wrong.any():
        index = int(np.flatnonzero(wrong)[0])
        return f"element {index} is {got.reshape(-1)[index]}, expected {expected.reshape(-1)[index]} (or {of_zero.reshape(-1)[index]})"
    return "zeroed"


def shrink_while_inferring(
    server: LiveServer, model: Model, seconds: float = 4.0, most: float = 20.0, until: Callable | None = None
) -> ShrinkRun:
    """Drive ``server`` as the module doc says for ``seconds`` (longer, up to
    ``most``, until ``until(run)``; default: both a whole answer and a
    refusal were seen); returns what the clients saw. The region is
    unregistered and removed after."""
    until = until or (lambda run: run.whole and run.refused)
    tag = uuid.uuid4().hex[:12]
    run = ShrinkRun(f"/mh-shrink-{tag}", f"shrinking-{tag}")
    values = np.random.default_rng(3).uniform(1, 2, model.shape).astype(np.float32)
    handle = shm.create_shared_memory_region(run.name, run.key, REGION_BYTES)
    path = f"/dev/shm/{run.key.lstrip('/')}"
    fd = os.open(path, os.O_RDWR)  # the test reads and writes the object only through this (never its mapping)
    os.pwrite(fd, values.tobytes(), INPUT_OFFSET)
    admin = httpclient.InferenceServerClient(server.http_url)
    admin.register_system_shared_memory(run.name, run.key, REGION_BYTES)
    stop, lock = threading.Event(), threading.Lock()

    def shrink():
        while not stop.is_set():
            os.ftruncate(fd, SHRUNK_BYTES)
            os.ftruncate(fd, REGION_BYTES)
            os.pwrite(fd, values, INPUT_OFFSET)

    def infer(index: int, protocol: str):
        module = httpclient if protocol == "http" else grpcclient
        url = server.http_url if protocol == "http" else server.grpc_url
        client = module.InferenceServerClient(url)
        out_offset = OUTPUT_OFFSET + index * (1 << 20)
        while not stop.is_set():
            tensor = module.InferInput(model.input, list(model.shape), "FP32")
            tensor.set_shared_memory(run.name, values.nbytes, offset=INPUT_OFFSET)
            output = module.InferRequestedOutput(model.output)
            output.set_shared_memory(run.name, values.nbytes, offset=out_offset)
            try:
                client.infer(model.name, [tensor], outputs=[output])
            except InferenceServerException as exc:
                status, message = str(exc.status()), exc.message() or ""
                with lock:
                    if status in REFUSED and (run.name in message or run.key in message) and "shrank" in message:
                        run.refused.append(message)
                    else:
                        run.failures.append(f"{protocol}: {status} {message}")
                continue
            except Exception as exc:  # a refused or reset connection
                with lock:
                    run.failures.append(f"{protocol}: {type(exc).__name__}: {exc}")
                continue
            data = os.pread(fd, values.nbytes, out_offset)
            if len(data) < values.nbytes:
                continue  # shrunk since the answer: nothing left to compare
            verdict = _check(values, model, np.frombuffer(data, np.float32).reshape(model.shape))
            with lock:
                if verdict == "whole":
                    run.whole += 1
                elif verdict == "zeroed":
                    run.zeroed += 1
                else:
                    run.failures.append(f"{protocol}: {verdict}")

    def other_caller():
        """Another caller, tensors in the body, over both protocols."""
        small = np.linspace(1, 2, int(np.prod(model.body_shape)), dtype=np.float32).reshape(model.body_shape)
        clients = [(httpclient, httpclient.InferenceServerClient(server.http_url))]
        clients.append((grpcclient, grpcclient.InferenceServerClient(server.grpc_url)))
        while not stop.is_set():
            for module, client in clients:
                tensor = module.InferInput(model.input, list(small.shape), "FP32")
                tensor.set_data_from_numpy(small)
                try:
                    got = client.infer(model.name, [tensor]).as_numpy(model.output)
                    ok = np.array_equal(got, model.compute(small))
                except Exception as exc:
                    got, ok = f"{type(exc).__name__}: {exc}", False
                with lock:
                    if ok:
                        run.other += 1
                    else:
                        run.failures.append(f"other caller: {got}")

    threads = [threading.Thread(target=shrink), threading.Thread(target=other_caller)]
    threads += [threading.Thread(target=infer, args=(i, p)) for i, p in enumerate(THREADS)]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    try:
        while time.monotonic() - started < most:
            time.sleep(0.1)
            if time.monotonic() - started >= seconds and until(run):
                break
    finally:
        stop.set()
        for thread in threads:
            thread.join(60)
        os.ftruncate(fd, REGION_BYTES)
        os.close(fd)
        try:
            admin.unregister_system_shared_memory(run.name)
        finally:
            shm.destroy_shared_memory_region(handle)
    return run
