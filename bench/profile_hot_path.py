"""Where the time of a small request goes: a profile of the hot path.

For the tiny model (FP32 [1,16], y = 2x + 1; session.run ~5 us) it measures,
in one run:

1. End to end, live (wrk for REST binary, h2load for gRPC, the bench's own
   loaders and requests, concurrency 1 and 8, interleaved rounds, medians):
   ``manage.py serve`` against the *transport floor*, the same servers
   (granian with the same options; grpc.aio with the same processes) running
   an application that reads the body and answers fixed bytes
   (bench/fixed_answer.py). The difference is what our application costs.
2. In process: the WSGI application called the way granian calls it, and the
   gRPC message conversion + DataPlane without the transport, timed (median
   us per request), and sampled by pyinstrument, with the samples' own time
   grouped by where the code lives (Django, our REST adapter, codecs,
   DataPlane, ONNX Runtime, metrics, ...).

Results go to stdout and bench/PROFILE.md.

    .venv/bin/python bench/profile_hot_path.py [--seconds 4] [--rounds 3] [--triton] [--before PATH]

``--triton`` adds Triton (bench/peers/triton.py, as ``make bench`` runs it)
to the live rounds: the floor, ``serve`` and Triton in one interleaved run.
``--before PATH`` adds ``serve`` of an earlier commit (a git worktree at
PATH) and the gRPC floor with grpcio's defaults, the one that commit ran
on: each one's p50 above its own floor, in the same rounds.
"""

from __future__ import annotations

import argparse
import io
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
WORK = ROOT / "bench" / "work" / "profile"
WORK.mkdir(parents=True, exist_ok=True)
os.environ.setdefault("VAR_DIR", tempfile.mkdtemp(prefix="var-", dir=WORK))
os.environ["DJANGO_SETTINGS_MODULE"] = "hosting.settings"
os.environ["MODELHOST_WARM_START"] = "0"
os.environ.setdefault("ORT_INTRA_OP_THREADS", "1")
os.environ.setdefault("ORT_INTER_OP_THREADS", "1")

import django  # noqa: E402

django.setup()

import numpy as np  # noqa: E402
from django.conf import settings  # noqa: E402
from django.core.management import call_command  # noqa: E402

from bench import models as bench_models  # noqa: E402
from bench.floor import FixedAnswerTarget, capture_answers  # noqa: E402
from bench.loads import make_loaders  # noqa: E402
from bench.targets import ServeTarget, ort_env  # noqa: E402
from bench.workloads import GRPC_INFER_PATH, Request, RestBinary, grpc_frame  # noqa: E402

MODEL = bench_models.MODELS["tiny"]
#: The gRPC floor with grpcio's defaults (GRPC_EXPERIMENTS unset): the floor of a ``--before`` commit.
DEFAULT_FLOOR = "fixed answer (grpcio defaults)"

#: Where sampled code lives -> the group it is reported under (first match wins).
GROUPS = (
    ("/onnxruntime/", "ONNX Runtime (session.run and its Python wrapper)"),
    ("inference/runtime/", "our runtime (executor, session cache, deadlines)"),
    ("inference/codecs/", "our codecs (JSON header, binary tensors, response)"),
    ("inference/rest/", "our REST adapter (DRF view, body reading)"),
    ("inference/grpc/", "our gRPC converters"),
    ("inference/dataplane.py", "our DataPlane and registry"),
    ("inference/serving/registry.py", "our DataPlane and registry"),
    ("inference/admission/caller.py", "our DataPlane and registry"),
    ("inference/requests/jobs.py", "our DataPlane and registry"),
    ("inference/requests/checks.py", "our DataPlane and registry"),
    ("inference/serving/snapshot.py", "our DataPlane and registry"),
    ("inference/protocol/", "our protocol types"),
    ("inference/observability/metrics.py", "metrics and request log"),
    ("prometheus_client", "metrics and request log"),
    ("inference/observability/statistics.py", "model statistics"),
    ("hosting/wsgi_dispatch.py", "our WSGI dispatch"),
    ("/rest_framework/", "DRF"),
    ("/django/", "Django (request, response, URL resolution)"),
    ("/google/protobuf/", "protobuf"),
    ("/numpy/", "numpy"),
    ("bench/profile_hot_path.py", "(this script: the loop, building the WSGI environ / protobuf parse and serialize)"),
)


LOOP = GROUPS[-1][1]


def group_of(frame, parent_group: str) -> str:
    """The group of a pyinstrument frame; a C function counts in its caller's
    group, except ``InferenceSession.run``'s pybind11 entry point."""
    if frame.function.startswith("pybind11") and frame.function.endswith(".run"):
        return GROUPS[0][1]
    path = (frame.file_path or "").replace("\\", "/")
    if not path or path == "<built-in>":
        return parent_group
    for needle, group in GROUPS:
        if needle in path:
            return group
    return "Python standard library and other"


# -- in process -------------------------------------------------------------------------------------


def _environ(request: Request) -> dict:
    environ = {
        "REQUEST_METHOD": "POST", "PATH_INFO": request.path, "SERVER_NAME": "127.0.0.1", "SERVER_PORT": "8000",
        "wsgi.input": io.BytesIO(request.body), "CONTENT_LENGTH": str(len(request.body)),
        "wsgi.url_scheme": "http", "SERVER_PROTOCOL": "HTTP/1.1", "HTTP_HOST": "127.0.0.1",
        "wsgi.errors": sys.stderr,
    }  # fmt: skip
    for key, value in request.headers.items():
        name = key.upper().replace("-", "_")
        environ[name if name == "CONTENT_TYPE" else f"HTTP_{name}"] = value
    return environ


def rest_call(application, request: Request):
    def start_response(status, headers, exc_info=None):
        if not status.startswith("200"):
            raise RuntimeError(f"in-process REST call answered {status}")

    def call():
        b"".join(application(_environ(request), start_response))

    return call


def grpc_call(message: bytes):
    from inference.dataplane import get_dataplane
    from inference.grpc import converters
    from inference.grpc.proto import oip_pb2 as pb

    dataplane = get_dataplane()

    def call():
        request = pb.ModelInferRequest.FromString(message)
        with dataplane.admit(None, request.model_name) as admission:
            infer_request, _ = converters.infer_request_from_proto(request, settings.MAX_REQUEST_BYTES)
            response = dataplane.infer(admission, infer_request)
        converters.infer_response_to_proto(response).SerializeToString()

    return call


def session_call(path: Path, inputs: dict[str, np.ndarray]):
    session = bench_models.session(path)

    def call():
        session.run(None, inputs)

    return call


def session_us_inside(call, calls: int = 20000) -> float:
    """Mean us of ``OnnxModel.run`` while ``call`` runs (the model's own time
    inside a request path, caches as the path leaves them)."""
    from inference.runtime.onnx import OnnxModel

    run, spent = OnnxModel.run, [0.0, 0]

    def timed(self, *args):
        started = time.perf_counter()
        try:
            return run(self, *args)
        finally:
            spent[0] += time.perf_counter() - started
            spent[1] += 1

    OnnxModel.run = timed
    try:
        for _ in range(calls):
            call()
    finally:
        OnnxModel.run = run
    return spent[0] / spent[1] * 1e6


def median_us(call, seconds: float = 1.0, rounds: int = 5) -> float:
    for _ in range(200):
        call()
    per_round = []
    for _ in range(rounds):
        n, started = 0, time.perf_counter()
        while (elapsed := time.perf_counter() - started) < seconds:
            for _ in range(100):
                call()
            n += 100
        per_round.append(elapsed / n * 1e6)
    return statistics.median(per_round)


def sampled_groups(call, seconds: float) -> tuple[int, dict[str, float], list[tuple[str, float]]]:
    """pyinstrument samples of ``call`` repeated for ``seconds``: (calls, share of
    own time per group, the 15 functions with the most own time and their shares).
    C functions called from Python count as their own frames where pyinstrument
    sees them (``session.run``'s pybind11 entry point), else as their caller's."""
    from pyinstrument import Profiler

    profiler = Profiler(interval=0.0001)
    n, started = 0, time.perf_counter()
    profiler.start()
    while time.perf_counter() - started < seconds:
        call()
        n += 1
    profiler.stop()
    root = profiler.last_session.root_frame()
    own: dict[str, float] = defaultdict(float)
    functions: dict[str, float] = defaultdict(float)
    stack = [(root, LOOP)]
    while stack:
        frame, parent_group = stack.pop()
        group = group_of(frame, parent_group)
        stack.extend((child, group) for child in frame.children)
        # A synthetic "[self]" child's time is already part of its parent's total_self_time.
        if not frame.is_synthetic and frame.total_self_time:
            own[group] += frame.total_self_time
            where = (frame.file_path or "").replace("\\", "/").split("site-packages/")[-1].replace(f"{ROOT}/", "")
            function = frame.function if len(frame.function) < 40 else "session.run (pybind11)"
            functions[f"`{function}` {where}:{frame.line_no}"] += frame.total_self_time
    total = sum(own.values()) or 1.0
    top = sorted(functions.items(), key=lambda kv: -kv[1])[:15]
    return (
        n,
        {group: value / total for group, value in sorted(own.items(), key=lambda kv: -kv[1])},
        [(where, value / total) for where, value in top],
    )


# -- live -------------------------------------------------------------------------------------------


def live(targets: list, requests: dict[str, dict[str, Request]], seconds: float,
         rounds: int) -> dict[tuple[str, str, int], list]:  # fmt: skip
    """``requests``: transport -> target name -> the request (its answer's size is the target's own)."""
    loaders = make_loaders(WORK)
    results: dict[tuple[str, str, int], list] = defaultdict(list)
    for r in range(rounds):
        for transport, by_target in requests.items():
            loader = loaders["wrk" if transport == "rest-binary" else "h2load"]
            for concurrency in (1, 8):
                for target in targets:
                    request = by_target.get(target.name)
                    if request is None:  # a floor of one transport only
                        continue
                    url = target.base_url if transport == "rest-binary" else f"http://{target.grpc_address}"
                    loader.run(url, request, concurrency, 1)  # warm-up
                    result = loader.run(url, request, concurrency, seconds)
                    if result.errors:
                        raise RuntimeError(f"{target.name} {transport} c{concurrency}: {result.errors} errors")
                    results[(target.name, transport, concurrency)].append(result)
                    print(f"  round {r + 1}/{rounds}  {target.name:12} {transport:11} c{concurrency}  "
                          f"{result.rps:8,.0f} req/s  p50 {result.p50_ms:.3f} ms")  # fmt: skip
    return results


# -- report -----------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=4, help="measured seconds per live cell and round (4)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved live rounds; medians reported (3)")
    parser.add_argument("--sample-seconds", type=float, default=3, help="pyinstrument sampling per path (3)")
    parser.add_argument("--triton", action="store_true", help="also Triton in the live rounds")
    parser.add_argument("--before", type=Path, help="a checkout of an earlier commit (git worktree): its serve "
                        "in the live rounds too, against the gRPC floor with grpcio's defaults")  # fmt: skip
    args = parser.parse_args()

    repository = WORK / "repository"
    bench_models.write_repository(repository, [MODEL])
    inputs = MODEL.sample_inputs(repository)
    model_path = bench_models.model_path(repository, MODEL)
    rest = RestBinary().build_request(MODEL, inputs)
    from inference.grpc.proto import oip_pb2 as pb  # our stubs (this process never imports tritonclient's)

    message = pb.ModelInferRequest(model_name=MODEL.name)
    for spec in MODEL.inputs:
        message.inputs.add(name=spec.name, datatype=spec.datatype, shape=list(inputs[spec.name].shape))
        message.raw_input_contents.append(np.ascontiguousarray(inputs[spec.name], dtype=spec.dtype).tobytes())
    grpc_message = message.SerializeToString()
    grpc_request = Request(GRPC_INFER_PATH, grpc_frame(grpc_message),
                           {"content-type": "application/grpc", "te": "trailers"})  # fmt: skip

    # In process.
    call_command("migrate", verbosity=0)
    call_command("import_repository", str(repository), verbosity=0)
    from hosting.wsgi import application

    paths = {
        "session.run alone": session_call(model_path, inputs),
        "REST binary: WSGI application": rest_call(application, rest),
        "gRPC: message -> DataPlane -> message": grpc_call(grpc_message),
    }
    timed = {label: median_us(call) for label, call in paths.items()}
    for label, call in list(paths.items())[1:]:
        timed[f"session.run inside '{label}'"] = session_us_inside(call)
    sampled = {label: sampled_groups(call, args.sample_seconds) for label, call in list(paths.items())[1:]}
    for label, us in timed.items():
        print(f"in process: {label:40} {us:8.1f} us")

    # Live.
    serve = ServeTarget(repository, WORK, name="serve")
    started: list = []
    try:
        serve.start()
        started.append(serve)
        answers = capture_answers(serve, rest, grpc_message)
        workers = int(serve.settings().get("HTTP_WORKERS", 2))
        threads = int(serve.settings().get("HTTP_THREADS", 4))
        processes = int(serve.settings().get("GRPC_PROCESSES", 2))
        fixed = FixedAnswerTarget(WORK, workers, threads, processes, *answers, settings.GRPC_EXPERIMENTS)
        fixed.start()
        started.append(fixed)
        if args.before is not None:  # an earlier commit, as it ran: grpcio's defaults, its own floor
            before = ServeTarget(repository, WORK, name="before", root=args.before.resolve())
            before.start()
            started.append(before)
            floor = FixedAnswerTarget(WORK, workers, threads, processes, *answers, None, name=DEFAULT_FLOOR)
            floor.start()
            started.append(floor)
        if args.triton:
            from bench.peers.triton import TritonTarget

            triton = TritonTarget(repository, ROOT / "bench" / "work", [MODEL])
            triton.start()
            started.append(triton)
        grpc_requests = {}
        for target in started:  # each answers with its own bytes (h2load checks their size)
            fixed_bytes = isinstance(target, FixedAnswerTarget)
            answer = answers[1] if fixed_bytes else capture_answers(target, rest, grpc_message)[1]
            grpc_requests[target.name] = Request(grpc_request.path, grpc_request.body, grpc_request.headers,
                                                 response_bytes=len(grpc_frame(answer)))  # fmt: skip
        requests = {"rest-binary": {t.name: rest for t in started if t.name != DEFAULT_FLOOR}, "grpc": grpc_requests}
        results = live(started, requests, args.seconds, args.rounds)
    finally:
        for target in reversed(started):
            target.stop()

    report = render(
        args,
        timed,
        sampled,
        results,
        workers,
        threads,
        processes,
        {"rest-binary": len(rest.body), "grpc": len(grpc_request.body)},
    )
    print("\n" + report)
    (ROOT / "bench" / "PROFILE.md").write_text(report)
    print("wrote bench/PROFILE.md")


def before_section(args, med) -> list[str]:
    """The ``--before`` commit's overhead above its floor against ours above ours (same rounds)."""
    lines = [
        "",
        f"### Against {args.before.resolve().name} (`--before`), in the same rounds",
        "",
        "Each server's p50 above the floor it runs on: for gRPC the earlier commit's is grpc.aio with "
        "grpcio's defaults (GRPC_EXPERIMENTS unset), ours with serve's GRPC_EXPERIMENTS; REST: one floor.",
        "",
        "| transport | conc. | floor p50 ms (before / ours) | before p50 ms | serve p50 ms | before's added (us) "
        "| ours added (us) | ours / before's |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for transport in ("rest-binary", "grpc"):
        for c in (1, 8):
            floor = med(DEFAULT_FLOOR if transport == "grpc" else "fixed answer", transport, c, "p50_ms")
            ours_floor = med("fixed answer", transport, c, "p50_ms")
            before, serve = med("before", transport, c, "p50_ms"), med("serve", transport, c, "p50_ms")
            added_before, added = (before - floor) * 1000, (serve - ours_floor) * 1000
            lines.append(
                f"| {transport} | {c} | {floor:.3f} / {ours_floor:.3f} | {before:.3f} | {serve:.3f} | "
                f"{added_before:.0f} | {added:.0f} | {added / added_before:.2f} |"
            )
    return lines


def render(args, timed, sampled, results, workers, threads, processes, sizes) -> str:
    def med(name, transport, c, attr):
        return statistics.median(getattr(r, attr) for r in results[(name, transport, c)])

    triton = any(name == "triton" for name, _, _ in results)

    commit = subprocess.run(["git", "describe", "--always", "--dirty"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()  # fmt: skip
    load = os.getloadavg()
    lines = [
        "# Where the time of a small request goes",
        "",
        f"`.venv/bin/python bench/profile_hot_path.py` at {commit}, "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; "
        f"{os.cpu_count()} cores, Python {platform.python_version()}; ORT intra-op "
        f"{ort_env()['ORT_INTRA_OP_THREADS']}; load average after the run {load[0]:.2f}.",
        "",
        f"Model `tiny`: {MODEL.describe()}. Requests as `make bench` sends them: REST binary "
        f"{sizes['rest-binary']} B (JSON header + binary tensor), gRPC {sizes['grpc']} B (`raw_input_contents`).",
        "",
        "## 1. End to end against the transport floor",
        "",
        f"`serve` (granian {workers} workers x {threads} threads; gRPC {processes} grpc.aio processes) against the "
        "same servers answering fixed bytes (bench/fixed_answer.py: reads the body, answers serve's own "
        f"answer){', and Triton 2.51 (bench/peers/triton.py)' if triton else ''}. Medians of {args.rounds} "
        f"interleaved rounds of {args.seconds:g} s; wrk / h2load.",
        "",
        "| transport | conc. | fixed answer req/s | serve req/s | ratio | fixed p50 ms | serve p50 ms | "
        f"p50 added by the application (us) |{' Triton req/s | serve / Triton | fixed answer / Triton |' * triton}",
        f"|---|---|---|---|---|---|---|---|{'---|---|---|' * triton}",
    ]
    for transport in ("rest-binary", "grpc"):
        for c in (1, 8):
            f_rps, s_rps = med("fixed answer", transport, c, "rps"), med("serve", transport, c, "rps")
            f_p50, s_p50 = med("fixed answer", transport, c, "p50_ms"), med("serve", transport, c, "p50_ms")
            row = (f"| {transport} | {c} | {f_rps:,.0f} | {s_rps:,.0f} | {s_rps / f_rps:.2f}x | {f_p50:.3f} | "
                   f"{s_p50:.3f} | {(s_p50 - f_p50) * 1000:.0f} |")  # fmt: skip
            if triton:
                t_rps = med("triton", transport, c, "rps")
                row += f" {t_rps:,.0f} | {s_rps / t_rps:.2f}x | {f_rps / t_rps:.2f}x |"
            lines.append(row)
    if any(name == "before" for name, _, _ in results):
        lines += before_section(args, med)
    lines += [
        "",
        "## 2. In process",
        "",
        "Median us per request (5 rounds of 1 s, after warm-up), one thread, no network:",
        "",
        "| path | us per request |",
        "|---|---|",
        *[f"| {label} | {us:.1f} |" for label, us in timed.items()],
        "",
        "The same `session.run` takes longer inside a request path than alone: the Python work around it "
        "evicts ONNX Runtime's code and data from the CPU caches (running it twice in a row inside the REST path "
        "brings the second call back to its warm time).",
        "",
        "Own time of the sampled frames by where the code lives (pyinstrument, 0.1 ms interval, "
        f"{args.sample_seconds:g} s per path):",
        "",
    ]
    for label, (calls, groups, top) in sampled.items():
        lines += [f"**{label}** ({calls:,} calls)", "", "| where | share of time |", "|---|---|"]
        lines += [f"| {group} | {share:.1%} |" for group, share in groups.items() if share >= 0.005]
        lines += ["", "| function (own time) | share |", "|---|---|"]
        lines += [f"| {where} | {share:.1%} |" for where, share in top]
        lines.append("")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
