"""Show where a large tensor is copied between the socket and ONNX Runtime.

Runs binary requests with an FP32 [1, 3, 224, 224] tensor (602,112 bytes)
through the server's WSGI application in process, the way the HTTP server
calls it (the body arrives through ``wsgi.input``), and:

1. traces Python allocations (tracemalloc) of at least half the tensor size
   during one request: every such allocation is a copy of tensor data;
2. times ONNX Runtime on the aligned view the server hands it against an
   owned array and a misaligned view, to show that it uses the view in
   place (a copy inside ONNX Runtime would cost time).

Two models: ``image`` ([1,3,224,224] in, channel means out: the input path)
and ``echo`` (Identity: the same tensor out, the output path).

    .venv/bin/python bench/profile_copies.py
"""

from __future__ import annotations

import io
import json
import os
import shutil
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("VAR_DIR", tempfile.mkdtemp(prefix="profile-copies-"))
os.environ["DJANGO_SETTINGS_MODULE"] = "hosting.settings"
os.environ["MODELHOST_WARM_START"] = "0"

import django  # noqa: E402

django.setup()

import numpy as np  # noqa: E402
from django.core.management import call_command  # noqa: E402

from tests.support import onnx_models as m  # noqa: E402

SHAPE = (1, 3, 224, 224)
NBYTES = int(np.prod(SHAPE)) * 4


def _body(model_binary_output: bool, x: np.ndarray) -> tuple[bytes, int]:
    header = {"inputs": [{"name": "INPUT0" if model_binary_output else "image", "shape": list(SHAPE),
                          "datatype": "FP32", "parameters": {"binary_data_size": NBYTES}}],
              "parameters": {"binary_data_output": True}}  # fmt: skip
    head = json.dumps(header).encode()
    return head + x.tobytes(), len(head)


def _environ(path: str, body: bytes, header_length: int) -> dict:
    return {
        "REQUEST_METHOD": "POST", "PATH_INFO": path, "SERVER_NAME": "127.0.0.1", "SERVER_PORT": "8000",
        "wsgi.input": io.BytesIO(body), "CONTENT_LENGTH": str(len(body)), "wsgi.url_scheme": "http",
        "SERVER_PROTOCOL": "HTTP/1.1", "HTTP_HOST": "127.0.0.1", "wsgi.errors": sys.stderr,
        "HTTP_INFERENCE_HEADER_CONTENT_LENGTH": str(header_length),
    }  # fmt: skip


def big_allocations(application, path: str, body: bytes, header_length: int) -> list[tuple[int, str]]:
    """Allocations >= half the tensor size made while serving one request."""
    out: list[bytes] = []

    def start_response(status, headers, exc_info=None):
        assert status.startswith("200"), status

    tracemalloc.start(12)
    environ = _environ(path, body, header_length)  # the server's own buffer of the body
    before = tracemalloc.take_snapshot()
    out.append(b"".join(application(environ, start_response)))
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    found = []
    for stat in after.compare_to(before, "traceback"):
        if stat.size_diff >= NBYTES // 2:
            frames = [f"{Path(f.filename).name}:{f.lineno}" for f in stat.traceback if "tracemalloc" not in f.filename]
            found.append((stat.size_diff, " <- ".join(reversed(frames[-4:]))))  # innermost first
    return found


def timing(session, name: str, arrays: dict) -> dict:
    result = {}
    for label, array in arrays.items():
        for _ in range(200):
            session.run(None, {name: array})
        runs = []
        for _ in range(7):
            started = time.perf_counter()
            for _ in range(300):
                session.run(None, {name: array})
            runs.append((time.perf_counter() - started) / 300 * 1e6)
        result[label] = sorted(runs)[3]
    return result


def main() -> None:
    call_command("migrate", verbosity=0)
    repo = Path(tempfile.mkdtemp(prefix="profile-repo-"))
    m.write_model(repo, "image", m.fixed_image())
    m.write_model(repo, "echo", m.identity("FP32", shape=SHAPE))
    call_command("import_repository", str(repo), verbosity=0)
    from hosting.wsgi import application

    x = np.random.default_rng(0).random(SHAPE, dtype=np.float32)
    print(f"tensor: FP32 {list(SHAPE)} = {NBYTES:,} bytes\n")
    for model, label in (
        ("image", "in  (image: tensor in, 3 floats out)"),
        ("echo", "in+out (echo: tensor in, tensor out)"),
    ):
        body, header_length = _body(model == "echo", x)
        for _ in range(3):
            big_allocations(application, f"/v2/models/{model}/infer", body, header_length)  # warm: load session
        found = big_allocations(application, f"/v2/models/{model}/infer", body, header_length)
        print(f"{label}: {len(found)} Python allocation(s) of tensor size per request")
        for size, where in found:
            print(f"    {size:>9,} bytes  {where}")
        print()

    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(m.fixed_image(), options)
    raw = x.tobytes()
    tail = bytes(raw)  # what the server reads: the binary tail as a bytes object of its own
    aligned_view = np.frombuffer(tail, dtype="<f4").reshape(SHAPE)
    misaligned = np.frombuffer(memoryview(b"\0" + raw)[1:], dtype="<f4").reshape(SHAPE)
    times = timing(session, "image", {"aligned view of the body": aligned_view, "owned array": x.copy(),
                                       "misaligned view": misaligned})  # fmt: skip
    print("ONNX Runtime session.run (median us, ReduceMean over the tensor):")
    for label, us in times.items():
        print(f"    {label:26} {us:8.1f}")
    print(
        "\nThe aligned view costs what an owned array costs: ONNX Runtime reads it in place. A misaligned\n"
        "view costs more: ONNX Runtime converts it; the server copies such an input once instead."
    )
    shutil.rmtree(repo, ignore_errors=True)


if __name__ == "__main__":
    main()
