"""Peak memory of validating an upload of S bytes (issue 26, item 3).

For each size, a fresh process writes a model of S MiB (``y = x @ W``, W
random FP32, inline) from a child process, then runs
``models_store.intake.validation.validate_artifact`` on it and reports its peak
RSS (``ru_maxrss``) above the RSS before, as a multiple of S. With
``--baseline DIR`` (a checkout of an earlier commit), the same measured
there, in the same run.

Usage: ``.venv/bin/python bench/validation_memory.py [--mib 200 400 800] [--baseline DIR]``;
prints a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

_MEASURE = r"""
import json, os, resource, sys, tempfile, time
from pathlib import Path
root, mib = sys.argv[1], int(sys.argv[2])
sys.path.insert(0, root)
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "hosting.settings")
os.environ["VAR_DIR"] = tempfile.mkdtemp(prefix="bench-validation-")
path = Path(tempfile.mkdtemp(prefix="bench-validation-")) / "model.onnx"
if os.fork() == 0:  # the model is built in a child: its memory is not ours
    import numpy as np, onnx
    from onnx import TensorProto, helper, numpy_helper
    side = int((mib * 2**20 / 4) ** 0.5)
    weight = np.random.default_rng(0).standard_normal((side, side), dtype=np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [-1, side])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [-1, side])],
        [numpy_helper.from_array(weight, "w")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    os._exit(0)
os.wait()
import django
django.setup()
try:
    from models_store.intake.validation import validate_artifact
except ImportError:  # a --baseline checkout from before models_store's packages
    from models_store.validation import validate_artifact
before = int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
started = time.perf_counter()
validate_artifact(path)
seconds = time.perf_counter() - started
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
size = path.stat().st_size / 2**20
print(json.dumps({"size": size, "above": peak - before, "seconds": seconds}))
"""


def measure(root: Path, mib: int) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", _MEASURE, str(root), str(mib)], capture_output=True, text=True, timeout=900, cwd=root
    )
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-2000:])
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mib", type=int, nargs="+", default=[200, 400, 800])
    parser.add_argument("--baseline", type=Path, default=None)
    args = parser.parse_args()
    roots = ([("baseline", args.baseline.resolve())] if args.baseline else []) + [("this commit", ROOT)]
    print("| code | model MiB | peak above start MiB | x size | seconds |\n|---|---:|---:|---:|---:|")
    for mib in args.mib:
        for label, root in roots:
            got = measure(root, mib)
            print(
                f"| {label} | {got['size']:.0f} | {got['above']:.0f} | {got['above'] / got['size']:.2f} "
                f"| {got['seconds']:.1f} |"
            )


if __name__ == "__main__":
    main()
