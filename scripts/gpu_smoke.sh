#!/usr/bin/env bash
# GPU smoke test (issue 40): one command, on a machine with an NVIDIA GPU, inside the GPU image
# (docker run --gpus 1 modelhost-gpu scripts/gpu_smoke.sh) or in a venv with onnxruntime-gpu[cuda,cudnn]
# and nvidia-ml-py installed. Needs redis-server (or REDIS_URL) and nvidia-smi; under 5 minutes.
#
#   1. a session's get_providers() (CUDAExecutionProvider first, or the cause);
#   2. `runworker --device cuda:0` starts (its probe session on the GPU);
#   3. a CNN with dynamic batching through that CUDA worker: throughput at batch 1 and batched;
#   4. GPU memory before and after (nvidia-smi);
#   5. a KIND_AUTO model (no instance group) beside a CPU worker: all of its requests on the GPU.
#
# Exit status 0 when every check passes; each failure prints what it means (docs/worker-mode.md,
# "First run on a GPU"). GPU_SMOKE_DIR keeps the logs (default: a temporary directory).
set -euo pipefail

cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python}
WORK=${GPU_SMOKE_DIR:-$(mktemp -d /tmp/gpu-smoke.XXXXXX)}
PORT=${GPU_SMOKE_PORT:-18000}
DEVICE=${GPU_SMOKE_DEVICE:-cuda:0}
mkdir -p "$WORK/repo"
PIDS=()
cleanup() {
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  echo "logs: $WORK"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
step() { echo; echo "== $*"; }

gpu_memory() { nvidia-smi --query-gpu=index,name,memory.used,memory.total --format=csv,noheader; }

step "1. ONNX Runtime and a session on the GPU"
command -v nvidia-smi >/dev/null || fail "nvidia-smi not found: no NVIDIA driver here (the GPU image gets it from the host: docker run --gpus)"
gpu_memory | tee "$WORK/memory-before.csv"
$PYTHON - <<'PY' || fail "the probe session is not on the GPU: the line above names the cause"
import onnxruntime as ort
from inference.runtime import cuda
print("onnxruntime", ort.__version__, "built with CUDA", cuda.cuda_build() or "?", "providers", ort.get_available_providers())
got = cuda.probe(0, cuda.gpu_providers(0))
print("probe session providers:", got)
assert got[0] == "CUDAExecutionProvider", got
PY

step "2. the models: a CNN with dynamic batching on the GPU, a KIND_AUTO model"
$PYTHON - "$WORK/repo" <<'PY'
import sys
from pathlib import Path

import numpy as np
from onnx import TensorProto, helper, numpy_helper

root = Path(sys.argv[1])
rng = np.random.default_rng(0)
w1 = numpy_helper.from_array(rng.standard_normal((32, 3, 3, 3)).astype(np.float32), "w1")
w2 = numpy_helper.from_array(rng.standard_normal((64, 32, 3, 3)).astype(np.float32), "w2")
fc = numpy_helper.from_array(rng.standard_normal((64, 10)).astype(np.float32), "fc")
nodes = [
    helper.make_node("Conv", ["image", "w1"], ["c1"], pads=[1, 1, 1, 1]),
    helper.make_node("Relu", ["c1"], ["r1"]),
    helper.make_node("Conv", ["r1", "w2"], ["c2"], pads=[1, 1, 1, 1], strides=[2, 2]),
    helper.make_node("Relu", ["c2"], ["r2"]),
    helper.make_node("GlobalAveragePool", ["r2"], ["g"]),
    helper.make_node("Flatten", ["g"], ["f"]),
    helper.make_node("MatMul", ["f", "fc"], ["scores"]),
]
graph = helper.make_graph(
    nodes, "cnn",
    [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["N", 3, 224, 224])],
    [helper.make_tensor_value_info("scores", TensorProto.FLOAT, ["N", 10])],
    [w1, w2, fc],
)
cnn = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
cnn.ir_version = 8
(root / "cnn" / "1").mkdir(parents=True)
(root / "cnn" / "1" / "model.onnx").write_bytes(cnn.SerializeToString())
(root / "cnn" / "config.pbtxt").write_text(
    'max_batch_size: 32\n'
    'input [ { name: "image" data_type: TYPE_FP32 dims: [ 3, 224, 224 ] } ]\n'
    'output [ { name: "scores" data_type: TYPE_FP32 dims: [ 10 ] } ]\n'
    'instance_group [ { kind: KIND_GPU count: 1 } ]\n'
    'dynamic_batching { preferred_batch_size: [ 8, 16 ] max_queue_delay_microseconds: 2000 }\n'
    'model_warmup [ { name: "one" batch_size: 1 inputs { key: "image" value: '
    '{ data_type: TYPE_FP32 dims: [ 3, 224, 224 ] zero_data: true } } } ]\n'
)
add = helper.make_graph(
    [helper.make_node("Add", ["x", "x"], ["y"])], "auto",
    [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
    [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])],
)
auto = helper.make_model(add, opset_imports=[helper.make_opsetid("", 13)])
auto.ir_version = 8
(root / "auto" / "1").mkdir(parents=True)
(root / "auto" / "1" / "model.onnx").write_bytes(auto.SerializeToString())
print("models written to", root)
PY

step "3. the server and the workers ($DEVICE and cpu)"
if [ -z "${REDIS_URL:-}" ]; then
  command -v redis-server >/dev/null || fail "no REDIS_URL and no redis-server: worker mode needs Redis"
  redis-server --port 16399 --save "" --appendonly no >"$WORK/redis.log" 2>&1 &
  PIDS+=($!)
  export REDIS_URL=redis://127.0.0.1:16399/0
  sleep 1
fi
export VAR_DIR="$WORK/var" SECRET_KEY=${SECRET_KEY:-gpu-smoke-$RANDOM$RANDOM$RANDOM} INFERENCE_EXECUTOR=workers
unset WORKER_CPU_FALLBACK
$PYTHON manage.py serve --model-repository "$WORK/repo" --http-port "$PORT" >"$WORK/serve.log" 2>&1 &
PIDS+=($!)
$PYTHON manage.py runworker --device "$DEVICE" --no-control >"$WORK/worker-gpu.log" 2>&1 &
GPU_WORKER=$!
PIDS+=($GPU_WORKER)
$PYTHON manage.py runworker --device cpu --no-control >"$WORK/worker-cpu.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 1 120); do
  if ! kill -0 "$GPU_WORKER" 2>/dev/null; then
    cat "$WORK/worker-gpu.log" >&2
    fail "the $DEVICE worker refused to start: its last line names the cause"
  fi
  if grep -q "sessions on CUDAExecutionProvider" "$WORK/worker-gpu.log" \
     && curl -fs "http://127.0.0.1:$PORT/v2/health/ready" >/dev/null; then break; fi
  sleep 1
done
grep "sessions on" "$WORK/worker-gpu.log" || fail "the $DEVICE worker did not start in 120 s (see $WORK/worker-gpu.log)"
sleep 2  # the front end reads the workers' heartbeats

step "4. the CNN through the CUDA worker: batch 1 and batched"
$PYTHON - "$PORT" <<'PY' || fail "inference through the CUDA worker failed (see the worker's log)"
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import tritonclient.http as httpclient

url = f"127.0.0.1:{sys.argv[1]}"
image = np.random.default_rng(1).standard_normal((1, 3, 224, 224)).astype(np.float32)


def infer(client, batch):
    inp = httpclient.InferInput("image", [batch, 3, 224, 224], "FP32")
    inp.set_data_from_numpy(np.repeat(image, batch, axis=0))
    return client.infer("cnn", [inp]).as_numpy("scores")


client = httpclient.InferenceServerClient(url)
first = infer(client, 1)
assert first.shape == (1, 10) and np.isfinite(first).all(), first
for batch, concurrency in ((1, 1), (8, 1), (1, 16)):
    clients = [httpclient.InferenceServerClient(url) for _ in range(concurrency)]
    started, done = time.perf_counter(), 0
    with ThreadPoolExecutor(concurrency) as pool:
        while time.perf_counter() - started < 10:
            for out in pool.map(lambda c: infer(c, batch), clients):
                np.testing.assert_allclose(out[:1], first, rtol=1e-3, atol=1e-3)
                done += batch
    rate = done / (time.perf_counter() - started)
    print(f"batch {batch} x concurrency {concurrency}: {rate:.0f} images/s")
stats = client.get_inference_statistics("cnn")["model_stats"][0]
print("batch_stats:", [(s["batch_size"], s["compute_infer"]["count"]) for s in stats["batch_stats"]])
PY
grep -c "warm-up sample 'one'" "$WORK/worker-gpu.log" >/dev/null || fail "model_warmup did not run on the CUDA worker"

step "5. GPU memory after"
gpu_memory | tee "$WORK/memory-after.csv"

step "6. a KIND_AUTO model with a CPU worker live: every request on the GPU"
$PYTHON - "$PORT" <<'PY'
import sys

import numpy as np
import tritonclient.http as httpclient

client = httpclient.InferenceServerClient(f"127.0.0.1:{sys.argv[1]}")
x = np.arange(8, dtype=np.float32).reshape(2, 4)
for _ in range(20):
    inp = httpclient.InferInput("x", [2, 4], "FP32")
    inp.set_data_from_numpy(x)
    np.testing.assert_array_equal(client.infer("auto", [inp]).as_numpy("y"), 2 * x)
group = client.get_model_config("auto")["instance_group"][0]
print("reported:", group["kind"], group["gpus"])
assert group["kind"] == "KIND_GPU", group
PY
grep -q "loaded auto/1" "$WORK/worker-gpu.log" || fail "the KIND_AUTO model was not loaded on the GPU worker"
if grep -q "loaded auto/1" "$WORK/worker-cpu.log"; then fail "a KIND_AUTO request ran on the CPU worker while a GPU worker served"; fi

echo
echo "PASS: sessions on the GPU, the CNN batched on the CUDA worker, KIND_AUTO on the GPU"
