"""Inference: ONNX Runtime's sessions, the serving registry's polling and
draining, the response cache, shared weights and memory budgets, deadlines,
API tokens on the data plane and rate limits."""

from __future__ import annotations

from hosting.settings.base import env
from hosting.settings.broker import REDIS_URL

#: ONNX Runtime: execution providers in order of preference, thread counts.
ORT_EXECUTION_PROVIDERS = env.list("ORT_EXECUTION_PROVIDERS", default=["CPUExecutionProvider"])
ORT_DEVICE_ID = env.int("ORT_DEVICE_ID", default=0)
ORT_INTRA_OP_THREADS = env.int("ORT_INTRA_OP_THREADS", default=1)
ORT_INTER_OP_THREADS = env.int("ORT_INTER_OP_THREADS", default=1)
ORT_GRAPH_OPTIMIZATION = env.str("ORT_GRAPH_OPTIMIZATION", default="all")
#: The CUDA execution provider's options (GPU workers, and CUDAExecutionProvider in process; inference/runtime/cuda.py):
#: gpu_mem_limit of each session's arena, i.e. per model instance (MiB; 0: no limit), how the arena grows
#: (kSameAsRequested or kNextPowerOfTwo), cuDNN's convolution algorithm search (HEURISTIC, EXHAUSTIVE: a
#: benchmark for every new input shape, or DEFAULT), and whether copies use the default stream.
ORT_CUDA_MEM_LIMIT_MB = env.int("ORT_CUDA_MEM_LIMIT_MB", default=0)
ORT_CUDA_ARENA_EXTEND_STRATEGY = env.str("ORT_CUDA_ARENA_EXTEND_STRATEGY", default="kSameAsRequested")
ORT_CUDA_CUDNN_CONV_ALGO_SEARCH = env.str("ORT_CUDA_CUDNN_CONV_ALGO_SEARCH", default="HEURISTIC")
ORT_CUDA_COPY_IN_DEFAULT_STREAM = env.bool("ORT_CUDA_COPY_IN_DEFAULT_STREAM", default=True)
#: How often each server process checks the registry's change stamp, in seconds.
REGISTRY_POLL_SECONDS = env.float("REGISTRY_POLL_SECONDS", default=1.0)
#: A version that stops serving (a new default, a label moved, a split changed,
#: deleted, unloaded) keeps running this long for requests routed to it before
#: every process saw the change (s; at least a few REGISTRY_POLL_SECONDS).
VERSION_DRAIN_SECONDS = env.float("VERSION_DRAIN_SECONDS", default=5.0)
#: Server-side bound on an inference in seconds (0: none); a request's own
#: ``timeout`` parameter (microseconds, as Triton) can only shorten it.
INFERENCE_TIMEOUT_SECONDS = env.float("INFERENCE_TIMEOUT_SECONDS", default=0.0)

#: Bytes of answers each server process keeps for models whose config enables the response cache
#: (``response_cache { enable: true }``; least recently used out first). 0: no cache.
RESPONSE_CACHE_BYTES = env.int("RESPONSE_CACHE_BYTES", default=128 * 1024 * 1024)
#: A Redis every front end shares the response cache through (worker mode: the answer one process
#: computed serves all); empty: each process keeps its own only. Bound its memory with Redis's
#: maxmemory + allkeys-lru. Entries expire after RESPONSE_CACHE_REDIS_TTL_SECONDS; a Redis slower
#: than RESPONSE_CACHE_REDIS_TIMEOUT_SECONDS counts as a miss.
RESPONSE_CACHE_REDIS_URL = env.str("RESPONSE_CACHE_REDIS_URL", default="")
RESPONSE_CACHE_REDIS_TTL_SECONDS = env.int("RESPONSE_CACHE_REDIS_TTL_SECONDS", default=3600)
RESPONSE_CACHE_REDIS_TIMEOUT_SECONDS = env.float("RESPONSE_CACHE_REDIS_TIMEOUT_SECONDS", default=0.25)
#: Models at least this large (MiB, with their external data) load their weights memory-mapped from one
#: per-machine copy ($VAR_DIR/run/weights), shared by every server process and CPU worker of the machine
#: (inference/runtime/shared_weights.py); 0: each session keeps its own copy. CPU execution only.
SHARED_WEIGHTS_MIN_MB = env.int("SHARED_WEIGHTS_MIN_MB", default=256)
#: Whether those sessions still pre-pack weights for ONNX Runtime's matrix kernels: faster on some models
#: (MiniLM: about 10%), but each session then keeps its own packed copy of those weights.
SHARED_WEIGHTS_PREPACK = env.bool("SHARED_WEIGHTS_PREPACK", default=False)
#: The memory budget (as WORKER_MEMORY_BUDGET_MB is a worker's) of the sessions of the machine's server
#: processes in process mode (0: none), MiB: each of the SERVING_PROCESSES gets an equal share.
SESSION_MEMORY_BUDGET_MB = env.int("SESSION_MEMORY_BUDGET_MB", default=0)
#: Every HTTP and gRPC process bounds glibc's heaps: blocks under 4 MiB reuse freed memory (a request's buffers are
#: not faulted in afresh each time), larger ones (weights) go back to the system when freed; under a memory budget
#: in RSS (SESSION_MEMORY_BUDGET_MB; a CPU worker's WORKER_MEMORY_BUDGET_MB) each serving process, workers
#: included, bounds them and trims them around loads, so that the budget holds in RSS
#: (inference/runtime/residency.py; docs/memory.md).
#: false: glibc's defaults (loads reuse freed memory and are faster, but RSS grows to about twice the budget, and
#: large request buffers are faulted in afresh per request).
SESSION_MEMORY_RELEASE = env.bool("SESSION_MEMORY_RELEASE", default=True)
#: How many processes serve inference in process on this machine (`serve` sets it: HTTP + gRPC processes).
SERVING_PROCESSES = env.int("SERVING_PROCESSES", default=1)
#: Sessions load on a version's first request; this bounds that request's wait for the load, seconds
#: (0: only the request's deadline): past it the request is refused (503 / UNAVAILABLE, "still loading;
#: retry") while the load goes on for the next requests (inference/runtime/runner.py).
MODEL_LOAD_WAIT_SECONDS = env.float("MODEL_LOAD_WAIT_SECONDS", default=120.0)
#: Each instance of a version without model_warmup runs zeros once at load (inference/runtime/warmup.py first_runs).
SESSION_FIRST_RUN = env.bool("SESSION_FIRST_RUN", default=True)
#: Models whose serving versions every serving process (and worker) loads at its start, before it is
#: ready, and never unloads for the memory budget: comma-separated names or shell-style patterns
#: (``fraud-*``; ``*``: every model). A model's config can ask for it too (parameter ``always_loaded``).
SESSIONS_ALWAYS_LOADED = tuple(env.list("SESSIONS_ALWAYS_LOADED", default=[]))

# --- Inference access control ----------------------------------------------
#: When true, inference needs ``Authorization: Bearer <token>`` (REST) or the
#: same ``authorization`` key in gRPC metadata; see inference/admission/auth.py.
INFERENCE_REQUIRE_TOKEN = env.bool("INFERENCE_REQUIRE_TOKEN", default=False)
#: Token scopes are reloaded when the registry stamp moves, and at the latest after this many seconds.
INFERENCE_TOKEN_CACHE_SECONDS = env.float("INFERENCE_TOKEN_CACHE_SECONDS", default=30.0)

# --- Rate limits (inference/admission/ratelimit.py) ----------------------------------------
#: Default limits of inference per team (its whole traffic), per API token and
#: for anonymous callers together: requests per second, burst, inferences in
#: flight; 0 means unlimited. Operators give a team its own limits in the admin
#: or with `manage.py set_team_limits`.
RATE_LIMIT_TEAM_RPS = env.float("RATE_LIMIT_TEAM_RPS", default=0.0)
RATE_LIMIT_TEAM_BURST = env.int("RATE_LIMIT_TEAM_BURST", default=0)
RATE_LIMIT_TEAM_IN_FLIGHT = env.int("RATE_LIMIT_TEAM_IN_FLIGHT", default=0)
RATE_LIMIT_TOKEN_RPS = env.float("RATE_LIMIT_TOKEN_RPS", default=0.0)
RATE_LIMIT_TOKEN_BURST = env.int("RATE_LIMIT_TOKEN_BURST", default=0)
RATE_LIMIT_TOKEN_IN_FLIGHT = env.int("RATE_LIMIT_TOKEN_IN_FLIGHT", default=0)
RATE_LIMIT_ANONYMOUS_RPS = env.float("RATE_LIMIT_ANONYMOUS_RPS", default=0.0)
RATE_LIMIT_ANONYMOUS_BURST = env.int("RATE_LIMIT_ANONYMOUS_BURST", default=0)
RATE_LIMIT_ANONYMOUS_IN_FLIGHT = env.int("RATE_LIMIT_ANONYMOUS_IN_FLIGHT", default=0)
# Fair admission to model instances (inference/admission/fair_share.py; docs/rate-limits.md#fair-share): each
# team is a flow; when a version's seats are all taken, requests wait in their flow's queue and
# seats go to the flows in turn. FAIR_QUEUE_PER_FLOW: requests one flow may have waiting per server
# process (more are refused 429 / RESOURCE_EXHAUSTED; on gRPC a waiting request is a coroutine, so
# the default lets a burst of a few hundred calls wait rather than be refused and resent, which would
# queue the resends in front of everyone in gRPC's own FIFO); FAIR_SHARE_WEIGHTS: team=weight pairs
# (turns per round, default 1); FAIR_SHARE=false turns it off (requests then wait in arrival order).
FAIR_SHARE = env.bool("FAIR_SHARE", default=True)
FAIR_QUEUE_PER_FLOW = env.int("FAIR_QUEUE_PER_FLOW", default=512)
# Sequences one team may have waiting for a sequence slot of a model version (more STARTs: 429).
FAIR_SEQUENCE_BACKLOG = env.int("FAIR_SEQUENCE_BACKLOG", default=64)
FAIR_SHARE_WEIGHTS = {k: int(v) for k, v in env.dict("FAIR_SHARE_WEIGHTS", default={}).items()}
#: Shadow traffic (inference/shadow/traffic.py): copies of requests waiting for a shadow thread per
#: server process (beyond: dropped and counted), and the shadow threads per process.
SHADOW_QUEUE = env.int("SHADOW_QUEUE", default=64)
SHADOW_THREADS = env.int("SHADOW_THREADS", default=1)
#: How long (ms) no live request must have begun in a server process before a shadow copy runs there.
SHADOW_QUIET_MS = env.float("SHADOW_QUIET_MS", default=1.0)
#: How long (ms) in all a shadow copy may wait for quiet spells (and, on a worker, for the worker to run no
#: other request) before it is not run, counted ``busy``.
SHADOW_WAIT_MS = env.float("SHADOW_WAIT_MS", default=50.0)
#: Where every process shares the limits (default: REDIS_URL); empty: each
#: process keeps its own (the embedded mode, one machine).
RATE_LIMIT_REDIS_URL = env.str("RATE_LIMIT_REDIS_URL", default=REDIS_URL)
#: An in-flight slot of a process that died is freed after this long (s).
RATE_LIMIT_LEASE_SECONDS = env.float("RATE_LIMIT_LEASE_SECONDS", default=120.0)
