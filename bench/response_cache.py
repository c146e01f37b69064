"""What the response cache saves (issue 28, item 3): a repeated request to a
model with ``response_cache { enable: true }`` against the same request to
the same ONNX file without it, in one ``manage.py serve`` (in process).

For each model (``cnn``; ``minilm`` with ``--minilm``, built offline by
bench/minilm.py), the repository holds ``<name>`` and ``<name>_cached``
(same file, the cache on). One client (tritonclient HTTP, binary tensors,
concurrency 1) sends the model's benchmark request ``--requests`` times to
each, interleaved in ``--rounds`` rounds; reported: p50 latency of each and
the ratio.

Usage: ``.venv/bin/python bench/response_cache.py [--minilm] [--requests 200] [--rounds 3]``.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.models import MODELS, model_path  # noqa: E402
from bench.targets import ServeTarget  # noqa: E402


def build(work: Path, names: list[str]) -> Path:
    """The benchmark models, each also as ``<name>_cached`` with the cache on."""
    repository = work / "repository"
    for name in names:
        model = MODELS[name]
        model.build(repository)
        (repository / name / "config.pbtxt").write_text("instance_group [ { kind: KIND_CPU count: 1 } ]\n")
        cached = repository / f"{name}_cached" / "1"
        cached.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(model_path(repository, model), cached / "model.onnx")
        (repository / f"{name}_cached" / "config.pbtxt").write_text(
            "instance_group [ { kind: KIND_CPU count: 1 } ]\nresponse_cache { enable: true }\n"
        )
    return repository


def p50_ms(client, httpclient, model: str, inputs: dict, outputs: list[str], requests: int) -> float:
    tensors = []
    for name, array in inputs.items():
        tensor = httpclient.InferInput(name, list(array.shape), {"float32": "FP32", "int64": "INT64"}[str(array.dtype)])
        tensor.set_data_from_numpy(array, binary_data=True)
        tensors.append(tensor)
    wanted = [httpclient.InferRequestedOutput(name, binary_data=True) for name in outputs]
    times = []
    for _ in range(requests):
        started = time.perf_counter()
        client.infer(model, tensors, outputs=wanted)
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minilm", action="store_true")
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--work", type=Path, default=ROOT / "bench" / "work")
    args = parser.parse_args()
    import tritonclient.http as httpclient

    names = ["cnn"] + (["minilm"] if args.minilm else [])
    if args.minilm:
        repository = build(args.work, names)  # minilm is built (once) under bench/work
    else:
        repository = build(Path(tempfile.mkdtemp(prefix="bench-cache-")), names)
    target = ServeTarget(repository, Path(tempfile.mkdtemp(prefix="bench-cache-var-")), name="cache")
    target.start(timeout=300)
    rows = []
    try:
        client = httpclient.InferenceServerClient(target.base_url.removeprefix("http://"))
        for name in names:
            model = MODELS[name]
            inputs = model.sample_inputs(repository)
            medians = {name: [], f"{name}_cached": []}
            for model_name in medians:  # warm: sessions loaded, the cache filled
                p50_ms(client, httpclient, model_name, inputs, model.output_names, 5)
            for _ in range(args.rounds):
                for model_name in medians:
                    medians[model_name].append(
                        p50_ms(client, httpclient, model_name, inputs, model.output_names, args.requests)
                    )
            plain, cached = statistics.median(medians[name]), statistics.median(medians[f"{name}_cached"])
            rows.append((name, plain, cached))
    finally:
        target.stop()
    print(f"serve in process; tritonclient HTTP binary, c=1; {args.rounds} rounds of {args.requests} requests\n")
    print("| model | computed p50 ms | from the cache p50 ms | ratio |\n|---|---:|---:|---:|")
    for name, plain, cached in rows:
        print(f"| {name} | {plain:.3f} | {cached:.3f} | {plain / cached:.1f}x |")


if __name__ == "__main__":
    main()
