"""Triton's own QA tests, unchanged, against ``manage.py serve`` (issue 37, item 3).

Runs these test files of triton-inference-server/server as they are:

- ``qa/L0_http/http_test.py`` and ``qa/L0_http/python_http_aio_test.py``
- ``qa/L0_grpc/python_grpc_aio_test.py``
- ``qa/L0_input_validation/input_validation_test.py``
- ``qa/L0_string_io/string_client_test.py``

each against a server started the way Triton's ``test.sh`` starts its own for
that file, on a repository of ONNX stand-ins of the models the test names
(built here, in code: ``bench/triton_qa_models.py``; same names, inputs, outputs,
datatypes, shapes and batching as Triton's QA models, computing what the test
checks). The tests talk to ``localhost:8000`` and ``localhost:8001``, so the
whole run happens in a network namespace of its own (``unshare -rn``: no
clash with anything on this machine's ports), else on the machine's ports if
they are free. One HTTP process (``--workers 1``): a model's queue is per
process (docs/dynamic-batching.md), and Triton's queue test counts on one.
Every test's outcome is printed with its classification (:data:`TRITON_ONLY`:
what only Triton does; :data:`LIMITATIONS`: what this server documents it
cannot do alike; each with the reason), then the counts.

Not part of ``make test``: it needs Triton's sources. Usage::

    # a checkout or a bare clone of https://github.com/triton-inference-server/server
    .venv/bin/python bench/triton_qa.py --triton-server /path/to/server [--keep] [--large]

``--large`` also runs ``test_loading_large_invalid_model`` (its client builds a
2 GiB body: about 10 GB of memory). Exit status 0 when no failure is ours.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import triton_qa_models as qa_models  # noqa: E402
from tests.support.server import LiveServer  # noqa: E402

#: Triton's QA helpers the test files import (``sys.path.append("../common")``).
COMMON = ("qa/common/test_util.py", "qa/common/infer_util.py", "qa/common/shm_util.py")


@dataclass
class Run:
    """One server for some of Triton's tests: ``tests`` are pytest node ids
    relative to ``qa/``; ``models`` name :data:`qa_models.STAND_INS`."""

    name: str
    models: tuple[str, ...]
    tests: tuple[str, ...]
    #: Triton's model control mode for the run: "none" (its default) where its test.sh gives
    #: none, else "" (explicit with every model loaded: serve's own default).
    control: str = ""


_HTTP_EXAMPLES = (
    "simple", "simple_dyna_sequence", "simple_identity", "simple_sequence", "simple_string",
    "densenet_onnx", "simple_string_dyna_sequence",
)  # fmt: skip

#: The runs, as Triton's test.sh scripts make them (their model directories and server flags).
RUNS = (
    Run(
        "L0_http http_test",
        (
            "onnx_zero_1_float32",
            "onnx_zero_1_object",
            "onnx_zero_1_float16",
            "onnx_zero_3_float32",
            "onnx_zero_1_object_1_element",
            "onnx_zero_1_float32_queue",
            "simple_identity",
            "simple_identity_int64",
        ),
        ("L0_http/http_test.py",),
    ),
    Run("L0_http aio", _HTTP_EXAMPLES, ("L0_http/python_http_aio_test.py",), "none"),
    Run("L0_grpc aio", (*_HTTP_EXAMPLES, "simple_int8"), ("L0_grpc/python_grpc_aio_test.py",), "none"),
    Run(
        "L0_input_validation",
        (
            "input_all_required",
            "input_optional",
            "input_all_optional",
            "pt_identity",
            "onnx_object_int32_int32",
            "plan_nobatch_zero_1_float32_int32",
            "plan_zero_1_float32_int32",
        ),
        (
            "L0_input_validation/input_validation_test.py::InputValTest",
            "L0_input_validation/input_validation_test.py::InputShapeTest",
        ),
        "none",
    ),
    Run(
        "L0_input_validation names",
        (),
        ("L0_input_validation/input_validation_test.py::ModelNameValidationTest",),
    ),
    Run("L0_string_io", ("onnx_zero_1_object", "string_identity"), ("L0_string_io/string_client_test.py",), "none"),
)

#: Test -> why only Triton passes it (what it checks is Triton's alone).
TRITON_ONLY = {
    "test_get_server_metadata": "Triton's server name: asserts name == 'triton' (ours says 'modelhost')",
    "test_load_model": "Triton's default model control mode (none): asserts that load is refused "
    "'if polling is enabled'; passes once serve has --model-control-mode (this harness sets MODEL_CONTROL_MODE=none)",
    "test_unload_model": "Triton's default model control mode (none): as test_load_model",
    "test_register_cuda_shared_memory": "CUDA shared memory (no GPU here; Triton's exact CUDA error text)",
    "test_negative_dimensions": "Triton answers 500 to a negative dimension; a bad request is 400 here "
    "(with Triton's text)",
    "test_load_oversized_file_parameter": "Triton answers 500 (its TODO TRI-958 says 400 is right); here a load "
    "without a token is 401 (Triton has no credentials), with one 400 naming the parameter",
    "test_model_name_valid": "Triton has no credentials: a load without a token is 401 here (every state-changing "
    "call needs one); with a token the text is Triton's ('failed to poll from model repository')",
}

#: Test -> what this server cannot do the same way (documented), though Triton's check is a fair one.
LIMITATIONS = {
    "test_unicode_bytes": "BYTES that are not UTF-8 through an ONNX string tensor: ONNX Runtime's Python API "
    "decodes every output string as UTF-8 (pybind11) and gives no way to put arbitrary bytes in; refused with a "
    "400 before the run (docs/v2-rest.md, Strings). Triton's string_identity is a Python-backend model",
}

LARGE = "L0_http/http_test.py::HttpTest::test_loading_large_invalid_model"


def read_source(triton: Path, path: str) -> bytes:
    """``path`` of Triton's server repository: from a work tree, else from a
    (bare) git repository's HEAD."""
    if (triton / path).is_file():
        return (triton / path).read_bytes()
    return subprocess.run(
        ["git", "--git-dir", str(_git_dir(triton)), "show", f"HEAD:{path}"], check=True, capture_output=True
    ).stdout


def _git_dir(triton: Path) -> Path:
    return triton / ".git" if (triton / ".git").exists() else triton


def source_commit(triton: Path) -> str:
    try:
        return subprocess.run(
            ["git", "--git-dir", str(_git_dir(triton)), "rev-parse", "HEAD"], check=True, capture_output=True, text=True
        ).stdout.strip()
    except (subprocess.CalledProcessError, FileNotFoundError):
        return "unknown"


def copy_tests(triton: Path, qa: Path) -> None:
    """Triton's test files and helpers, unchanged, under ``qa/``."""
    files = {test.split("::")[0] for run in RUNS for test in run.tests}
    for name in sorted(files) + [c.removeprefix("qa/") for c in COMMON]:
        target = qa / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(read_source(triton, f"qa/{name}"))


@dataclass
class Outcome:
    test: str
    status: str  # passed, failed, skipped
    message: str = ""

    @property
    def short(self) -> str:
        return self.test.rsplit(".", 1)[-1]


#: Runs one of Triton's test modules with unittest (as its test.sh does: ``python <file>``),
#: recording each test's outcome (a subtest's failure is its test's) as JSON lines.
RUNNER = """
import json, sys, unittest
module, selector, out = sys.argv[1:4]
skip = set(sys.argv[4:])
sys.argv = [module]
loader = unittest.defaultTestLoader
suite = loader.loadTestsFromName(module + ("." + selector if selector else ""))


class Recorder(unittest.TextTestResult):
    def _record(self, test, status, message=""):
        with open(out, "a") as f:
            f.write(json.dumps({"test": test.id(), "status": status, "message": message}) + "\\n")

    def addSuccess(self, test):
        super().addSuccess(test)
        self._record(test, "passed")

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self._record(test, "failed", self._exc_info_to_string(err, test))

    def addError(self, test, err):
        super().addError(test, err)
        self._record(test, "failed", self._exc_info_to_string(err, test))

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        self._record(test, "skipped", reason)

    def addSubTest(self, test, subtest, err):
        super().addSubTest(test, subtest, err)
        if err is not None:
            self._record(test, "failed", self._exc_info_to_string(err, test))


def without(suite):
    for item in suite:
        if isinstance(item, unittest.TestSuite):
            yield from without(item)
        elif item.id().rsplit(".", 1)[-1] not in skip:
            yield item


unittest.TextTestRunner(resultclass=Recorder, verbosity=2).run(unittest.TestSuite(without(suite)))
"""


def run_tests(run: Run, qa: Path, work: Path, large: bool) -> list[Outcome]:
    """Start the server for ``run`` on 8000/8001, run its tests, read their outcomes."""
    slug = run.name.replace(" ", "_")
    repository = work / "repositories" / slug
    repository.mkdir(parents=True, exist_ok=True)
    for name in run.models:
        qa_models.write(repository, name)
    # One HTTP process: a model's queue (and its max_queue_size) is per process
    # (docs/dynamic-batching.md), and Triton's test_descriptive_status_code counts on one.
    # MODEL_CONTROL_MODE: serve's --model-control-mode default (a serve without the flag ignores it).
    env = {"MODEL_CONTROL_MODE": run.control} if run.control else {}
    server = LiveServer(repository, work / "var" / slug, extra_env=env, workers=1)
    server.http_port, server.grpc_port = 8000, 8001
    server.start(timeout=600, attempts=1)
    runner = work / "runner.py"
    runner.write_text(RUNNER)
    outcomes: list[Outcome] = []
    try:
        for index, test in enumerate(run.tests):
            path, _, selector = test.partition("::")
            directory, module = qa / path.split("/")[0], Path(path).stem
            results = work / f"{slug}-{index}.jsonl"
            skip = [] if large else [LARGE.rsplit("::", 1)[-1]]
            env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
            env["PYTHONPATH"] = str(directory)
            with open(work / f"{slug}-{index}.log", "wb") as log:
                subprocess.run(
                    [sys.executable, str(runner), module, selector, str(results), *skip],
                    cwd=directory, env=env, stdout=log, stderr=subprocess.STDOUT,
                )  # fmt: skip
            outcomes += read_results(results, path.split("/")[0])
    finally:
        server.stop()
    return outcomes


def read_results(results: Path, directory: str) -> list[Outcome]:
    """One outcome per test: failed when any of its subtests failed."""
    by_test: dict[str, Outcome] = {}
    if not results.exists():
        return []
    for line in results.read_text().splitlines():
        row = json.loads(line)
        test = f"{directory}/{row['test']}"
        known = by_test.get(test)
        if known is None or (row["status"] == "failed" and known.status != "failed"):
            by_test[test] = Outcome(test, row["status"], row["message"])
    return list(by_test.values())


def classify(outcome: Outcome) -> str:
    if outcome.status != "failed":
        return outcome.status
    if outcome.short in TRITON_ONLY:
        return "triton-only"
    return "limitation" if outcome.short in LIMITATIONS else "ours"


def report(outcomes: list[Outcome], commit: str) -> int:
    print(f"Triton server sources at {commit}")
    ours = 0
    for outcome in outcomes:
        kind = classify(outcome)
        line = f"{kind:12} {outcome.test}"
        if kind in ("triton-only", "limitation"):
            line += f"\n             {TRITON_ONLY.get(outcome.short) or LIMITATIONS[outcome.short]}"
        elif kind == "ours":
            ours += 1
            last = [text for text in outcome.message.splitlines() if text.strip()][-1:]  # the assertion
            line += "\n             " + last[0].strip()[:300] if last else ""
        print(line)
    kinds = ("passed", "triton-only", "limitation", "ours", "skipped")
    counts = {k: sum(classify(o) == k for o in outcomes) for k in kinds}
    failed = counts["triton-only"] + counts["limitation"] + counts["ours"]
    print(
        f"\n{len(outcomes)} tests: {counts['passed']} passed, {failed} failed ({counts['triton-only']} Triton-only, "
        f"{counts['limitation']} documented limitation, {counts['ours']} ours), {counts['skipped']} skipped"
    )
    return 1 if ours else 0


def in_own_network() -> bool:
    """Re-run this script in a network namespace of its own (ports 8000/8001
    private to it); False when the machine does not allow one."""
    if os.environ.get("TRITON_QA_NETNS") == "1":
        return False
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        return False
    probe = subprocess.run(["unshare", "-rn", "true"], capture_output=True)
    if probe.returncode != 0:
        return False
    script = 'ip link set lo up && exec "$@"'
    command = ["unshare", "-rn", "sh", "-c", script, "sh", sys.executable, *sys.argv]
    code = subprocess.run(command, env=dict(os.environ, TRITON_QA_NETNS="1")).returncode
    raise SystemExit(code)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--triton-server", type=Path, required=True, help="Triton server sources (checkout or git dir)")
    parser.add_argument("--keep", action="store_true", help="keep the work directory (logs, repositories)")
    parser.add_argument("--large", action="store_true", help="also the 2 GiB load test (about 10 GB of memory)")
    parser.add_argument("--only", default="", help="run only the runs whose name contains this")
    args = parser.parse_args()
    in_own_network()
    work = Path(tempfile.mkdtemp(prefix="triton-qa-"))
    qa = work / "qa"
    copy_tests(args.triton_server, qa)
    outcomes: list[Outcome] = []
    try:
        for run in RUNS:
            if args.only in run.name:
                outcomes += run_tests(run, qa, work, args.large)
    finally:
        if args.keep:
            print(f"work directory: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    if not args.large and any(LARGE.startswith(test.split("::")[0]) for run in RUNS for test in run.tests):
        print(f"not run      {LARGE} (its client needs about 10 GB: --large)")
    return report(outcomes, source_commit(args.triton_server))


if __name__ == "__main__":
    raise SystemExit(main())
