"""Worker mode: inference in pinned ``runworker`` processes (one per GPU, or
CPU workers), reached over mutual TLS or a Unix socket; their memory, cache,
pools and the queue depths KEDA scales on (docs/worker-mode.md)."""

from __future__ import annotations

from pathlib import Path

from hosting.settings.base import VAR_DIR, env

#: inprocess (default: ONNX Runtime in each server process) or workers (pinned
#: workers started with `manage.py runworker --device ...`, needs REDIS_URL).
INFERENCE_EXECUTOR = env.str("INFERENCE_EXECUTOR", default="inprocess")
#: Where a worker accepts front-end connections from other machines over
#: mutual TLS (host:port; port 0: any free port; needs the WORKER_TLS_* files).
#: Empty: no TCP listener, only the worker's Unix socket (front ends on its machine).
WORKER_LISTEN = env.str("WORKER_LISTEN", default="")
#: The worker link's mutual TLS (inference/workers/link.py): the deployment's CA
#: certificate, and this process's certificate and key (a worker's: serverAuth
#: for WORKER_TLS_SERVER_NAME; a front end's: clientAuth), PEM files; all three or none.
WORKER_TLS_CA = env.str("WORKER_TLS_CA", default="")
WORKER_TLS_CERT = env.str("WORKER_TLS_CERT", default="")
WORKER_TLS_KEY = env.str("WORKER_TLS_KEY", default="")
WORKER_TLS_SERVER_NAME = env.str("WORKER_TLS_SERVER_NAME", default="modelhost-worker")
#: A worker also listens on a Unix socket in $VAR_DIR/run/ for front ends on its machine.
WORKER_UNIX_SOCKET = env.bool("WORKER_UNIX_SOCKET", default=True)
#: Connections a worker holds at most, in all and per authenticated front end (a
#: process on its machine; over TLS a certificate at one address); idle ones are
#: closed after WORKER_IDLE_SECONDS (front ends drop theirs at half that).
WORKER_MAX_CONNECTIONS = env.int("WORKER_MAX_CONNECTIONS", default=1024)
WORKER_MAX_CONNECTIONS_PER_PEER = env.int("WORKER_MAX_CONNECTIONS_PER_PEER", default=256)
WORKER_IDLE_SECONDS = env.float("WORKER_IDLE_SECONDS", default=300.0)
#: Connections each front-end process holds to one worker at most; a request
#: beyond waits (until its deadline) for one to come free (docs/worker-mode.md).
WORKER_CONNECTIONS_PER_PROCESS = env.int("WORKER_CONNECTIONS_PER_PROCESS", default=32)
#: How long a draining worker (SIGTERM, manage.py drainworker) waits for the
#: requests it holds before it exits (s).
WORKER_DRAIN_SECONDS = env.float("WORKER_DRAIN_SECONDS", default=20.0)
#: The host:port front ends connect to (default: the listening address; set it
#: when the worker listens on 0.0.0.0 or behind NAT, e.g. worker-gpu0:7070).
WORKER_ADVERTISE = env.str("WORKER_ADVERTISE", default="")
#: Where a worker caches artifacts by sha256 (no shared disk needed).
WORKER_CACHE_DIR = Path(env.str("WORKER_CACHE_DIR", default=str(VAR_DIR / "worker-cache")))
#: A cuda:<n> worker whose probe session is not on its GPU runs on the CPU instead of refusing to start
#: (a development machine without a GPU; never in production).
WORKER_CPU_FALLBACK = env.bool("WORKER_CPU_FALLBACK", default=False)
#: The ordinal (device_id) of a cuda:<n> worker's GPU in its process; -1: derived from the label
#: (bare metal: the worker sets CUDA_VISIBLE_DEVICES=<n> and uses 0). 0 in a container that reserves one GPU.
WORKER_GPU_ORDINAL = env.int("WORKER_GPU_ORDINAL", default=-1)
#: A GPU worker's budget of GPU memory for its loaded sessions (MiB); 0: the GPU's memory (NVML) less the
#: CUDA context and 10%. Each version is charged ORT_CUDA_MEM_LIMIT_MB x instances, or what its load took.
WORKER_GPU_MEMORY_BUDGET_MB = env.int("WORKER_GPU_MEMORY_BUDGET_MB", default=0)
#: GPU workers put the TensorRT execution provider before CUDA (opt-in; onnxruntime-gpu with TensorRT's
#: libraries), caching engines in WORKER_TENSORRT_CACHE_DIR (built once per model and shape); FP16 engines.
WORKER_TENSORRT = env.bool("WORKER_TENSORRT", default=False)
WORKER_TENSORRT_CACHE_DIR = Path(env.str("WORKER_TENSORRT_CACHE_DIR", default=str(VAR_DIR / "tensorrt-cache")))
WORKER_TENSORRT_FP16 = env.bool("WORKER_TENSORRT_FP16", default=False)
#: The pool a worker belongs to (e.g. its Kubernetes Deployment: one per GPU
#: kind), reported in its heartbeat: /metrics and the KEDA lists add up per pool.
WORKER_POOL = env.str("WORKER_POOL", default="")
#: Front ends keep a Redis list per device queue whose length is the queue's
#: depth (modelhost:queue-depth:<queue>), for KEDA's Redis scaler.
QUEUE_DEPTH_KEYS = env.bool("QUEUE_DEPTH_KEYS", default=False)
#: In worker mode, the deadline of a request that sets none (s).
WORKER_TIMEOUT_SECONDS = env.float("WORKER_TIMEOUT_SECONDS", default=30.0)
#: Model instances a CPU worker runs of a model without an instance group (0: as many as its cores
#: hold sessions of ORT_INTRA_OP_THREADS threads, as a GPU worker fills its GPU).
WORKER_CPU_INSTANCES = env.int("WORKER_CPU_INSTANCES", default=0)
#: Memory a worker's loaded sessions may use (each charged what its load took), MiB.
WORKER_MEMORY_BUDGET_MB = env.int("WORKER_MEMORY_BUDGET_MB", default=4096)
