"""The composition root: the one place that wires the apps together.

``inference`` (the serving side) defines the ports it needs
(:mod:`inference.ports`) and never imports ``models_store``; ``models_store``
implements them (:mod:`models_store.serving`, :mod:`models_store.tokens`) and
imports ``inference``; this module, run when Django starts (``HostingConfig.ready``),
installs the implementations and builds the process's data plane (REST and
gRPC processes) or worker runtime (``runworker``) from settings.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import redis
from django.conf import settings

import hosting
from hosting import deployment
from inference import ports, runtime_settings
from inference.admission.fair_share import FairShare
from inference.admission.ratelimit import Defaults, MemoryStore, RateLimiter, RedisStore
from inference.dataplane import DataPlane
from inference.executor import Executor
from inference.extensions import Extensions
from inference.observability import metrics as observability
from inference.observability import outage, tracing
from inference.observability.payload_log import PayloadLogger, sink_for
from inference.observability.rollups_db import DatabaseRollups
from inference.observability.statistics import StatisticsRecorder
from inference.observability.statistics_db import DatabaseStatistics
from inference.observability.triton_metrics import HostMetrics, TritonMetrics
from inference.ports import Quota
from inference.response_cache import ResponseCache
from inference.runtime import cuda, residency
from inference.runtime import onnx as onnx_runtime
from inference.runtime.executors import InProcessExecutor, session_loader
from inference.runtime.gpu_memory import GpuCosts, budget_bytes, open_nvml
from inference.runtime.runner import ModelRunner
from inference.runtime.sequences.batcher import SequenceBatcher
from inference.runtime.shared_weights import Sharing
from inference.serving.changes import beacon_at
from inference.serving.instance_groups import cpu_instances
from inference.serving.registry import ModelRegistry
from inference.shadow.rollups_db import DatabaseShadowRollups
from inference.shadow.traffic import ShadowSettings
from inference.shared_memory.regions import RegionRegistry
from inference.workers.client.executor import RemoteExecutor
from inference.workers.placement import WorkerDirectory, read_workers
from inference.workers.server.runtime import WorkerRuntime
from models_store import outages, storage
from models_store.accounts.authorizer import StoreAuthorizer, TokenCache
from models_store.intake import validating
from models_store.serving import CacheJanitor, StoreArtifacts, StoreAuditLog, StoreRegistrySource
from models_store.webhooks import delivery as webhooks

logger = logging.getLogger(__name__)

#: INFERENCE_EXECUTOR values: ONNX Runtime in this process, or in inference workers.
IN_PROCESS, WORKERS = "inprocess", "workers"


def executor_mode() -> str:
    """``inprocess`` or ``workers`` (anything else is refused by ``serve``)."""
    return settings.INFERENCE_EXECUTOR


def install() -> None:
    """Install the model store's implementations of the serving side's ports."""
    token_cache = TokenCache(ttl=settings.INFERENCE_TOKEN_CACHE_SECONDS)
    ports.install(
        registry_source=StoreRegistrySource(),
        artifact_source=StoreArtifacts(),
        authorizer=StoreAuthorizer(token_cache),
        statistics_store=DatabaseStatistics(),
        dataplane_factory=build_dataplane,
        extensions_factory=build_extensions,
        audit_log=StoreAuditLog(),
        outage_error=outages.protocol_error,
    )
    if executor_mode() == IN_PROCESS:
        # The embedded server validates uploads itself (also with REDIS_URL, e.g. for shared
        # rate limits: no worker takes its tasks), with the providers it serves with.
        providers = onnx_runtime.provider_list(settings.ORT_EXECUTION_PROVIDERS, settings.ORT_DEVICE_ID, cuda_options())
        validates_here = no_celery_worker
    else:  # a front end validates imports (and uploads no worker takes) on the CPU, writing big models'
        # shared weight copies for this machine's CPU workers (same VAR_DIR), as a worker's validation does
        providers, validates_here = ["CPUExecutionProvider"], no_validating_worker
    validator = validating.Validator(providers=tuple(providers), sharing=_sharing(providers))
    validating.configure(validator, validates_here=validates_here)
    if settings.REDIS_URL:
        validating.configure(queue_note=validation_queue_note)
    # Webhook attempts run where validations run: on this process's threads, or as Celery tasks.
    webhooks.configure(delivers_here=validating.validates_here, queue=queue_webhook)
    outage.REFUSALS.interval = settings.REFUSAL_LOG_SECONDS
    if executor_mode() == WORKERS:
        deployment.raise_open_files_limit()
    runtime_settings.install_settings(Path(settings.VAR_DIR) / "run")
    install_tracing()


_celery_seen: list = [0.0, False]  # (time.monotonic() of the last ping, whether a worker answered)


def no_celery_worker(cache_seconds: float = 10.0) -> bool:
    """Process mode: True unless REDIS_URL is set and a Celery worker
    (``celery -A hosting worker``) answers a ping (kept ``cache_seconds``):
    the server validates uploads itself rather than queue them for nobody."""
    if not settings.REDIS_URL:
        return True
    from hosting.celery import app

    now = time.monotonic()
    if now - _celery_seen[0] > cache_seconds:
        _celery_seen[:] = [now, bool(app.control.ping(timeout=1.0, limit=1))]
    return not _celery_seen[1]


def queue_webhook(delivery_id: int, delay: float) -> None:
    """Queue a webhook delivery's attempt as the Celery task, ``delay`` seconds from now."""
    from models_store.tasks import deliver_webhook

    deliver_webhook.apply_async((delivery_id,), countdown=delay)


def no_validating_worker() -> bool:
    """Worker mode: True while no inference worker takes validation tasks
    (from their heartbeats), so that this process validates uploads itself;
    raises RedisError when Redis cannot tell."""
    return not any(w.announcement.control for w in read_workers(redis_client(timeout=2.0)).values())


def validation_queue_note() -> str:
    """Who will take a queued validation, from the workers' heartbeats (worker
    mode; with plain Celery workers, which send no heartbeats, it cannot tell)."""
    if executor_mode() != WORKERS:
        return "a Celery worker (celery -A hosting worker) takes it"
    try:
        workers = read_workers(redis_client(timeout=2.0))
    except redis.RedisError as exc:
        return f"Redis is unreachable ({exc}); it waits there until a worker takes it"
    takers = sorted(w.id for w in workers.values() if w.announcement.control)
    if not takers:
        return "no inference worker takes validation tasks now; the reaper re-queues it (VALIDATION_DEADLINE_SECONDS)"
    return f"{len(takers)} inference worker(s) take validation tasks ({', '.join(takers[:5])})"


def install_tracing() -> None:
    """OpenTelemetry, when OTEL_EXPORTER_OTLP_ENDPOINT (or TRACE_SPAN_FILE) is
    set: the provider and exporters, and the instrumentations of Django (the
    web UI and the management API: the inference routes have no middleware
    and make their own spans), Celery (control tasks) and the gRPC server
    (every method but ModelInfer, which makes its own spans, sampled by the
    trace settings)."""
    exporters = []
    if settings.OTEL_EXPORTER_OTLP_ENDPOINT:

        def otlp():
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            return OTLPSpanExporter(), False

        exporters.append(otlp)
    if settings.TRACE_SPAN_FILE:
        exporters.append(lambda: (tracing.file_exporter(settings.TRACE_SPAN_FILE), True))
    if not exporters or tracing.ENABLED:
        return
    tracing.configure(settings.OTEL_SERVICE_NAME, exporters)
    from opentelemetry.instrumentation.celery import CeleryInstrumentor
    from opentelemetry.instrumentation.django import DjangoInstrumentor
    from opentelemetry.instrumentation.grpc import GrpcAioInstrumentorServer, filters

    DjangoInstrumentor().instrument()
    CeleryInstrumentor().instrument()
    GrpcAioInstrumentorServer(filter_=filters.negate(filters.method_name("ModelInfer"))).instrument()


def _registry() -> ModelRegistry:
    return ModelRegistry(
        ports.container.registry_source, poll_seconds=settings.REGISTRY_POLL_SECONDS, beacon=beacon_at(settings.VAR_DIR)
    )


def _session_options():
    return onnx_runtime.session_options(
        settings.ORT_INTRA_OP_THREADS, settings.ORT_INTER_OP_THREADS, settings.ORT_GRAPH_OPTIMIZATION
    )


def shared_weights_dir() -> Path:
    """This machine's copies of big models with memory-mapped weights (inference/runtime/shared_weights.py)."""
    return Path(settings.VAR_DIR) / "run" / "weights"


def _loader(artifacts, providers: list):
    """Sessions of ``artifacts`` on ``providers`` with the settings' options and shared weights."""
    prepack = settings.SHARED_WEIGHTS_PREPACK
    return session_loader(artifacts, _session_options(), providers, _shared_weights(providers), prepack)


def _shared_weights(providers: list) -> tuple[Path, int] | None:
    """(directory, minimum bytes) for sessions on the CPU only (a GPU copies weights to its memory anyway)."""
    on_cpu = all((p if isinstance(p, str) else p[0]) == "CPUExecutionProvider" for p in providers)
    if not on_cpu or settings.SHARED_WEIGHTS_MIN_MB <= 0:
        return None
    return shared_weights_dir(), settings.SHARED_WEIGHTS_MIN_MB * 1024 * 1024


def _sharing(providers: list) -> Sharing | None:
    """How validations on ``providers`` write this machine's copies with shared weights (None: they do not)."""
    shared = _shared_weights(providers)
    return None if shared is None else Sharing(*shared, prepack=settings.SHARED_WEIGHTS_PREPACK)


def _observe_load(target, seconds: float) -> None:
    observability.LOAD_TIME.labels(target.model, str(target.version)).observe(seconds)


def _observe_eviction(target) -> None:
    observability.EVICTIONS.labels(target.model, str(target.version)).inc()


def _observe_wait(target, seconds: float, transient: bool) -> None:
    observability.LOAD_WAIT.labels("transient" if transient else "resident").observe(seconds)


def cuda_options(tensorrt: bool = False) -> cuda.CudaOptions:
    """The GPU providers' options from settings (ORT_CUDA_*; TensorRT: WORKER_TENSORRT*)."""
    return cuda.CudaOptions(
        mem_limit_bytes=settings.ORT_CUDA_MEM_LIMIT_MB * 2**20,
        arena_extend_strategy=settings.ORT_CUDA_ARENA_EXTEND_STRATEGY,
        cudnn_conv_algo_search=settings.ORT_CUDA_CUDNN_CONV_ALGO_SEARCH,
        copy_in_default_stream=settings.ORT_CUDA_COPY_IN_DEFAULT_STREAM,
        tensorrt=tensorrt,
        tensorrt_cache=str(settings.WORKER_TENSORRT_CACHE_DIR),
        tensorrt_fp16=settings.WORKER_TENSORRT_FP16,
    )


def _runner(loader, budget_mb: int, processes: int = 1, **gpu) -> ModelRunner:
    """A model runner with the metrics callbacks; ``processes`` share the
    budget equally; ``gpu``: a GPU worker's ``budget_bytes``, ``memory`` and ``costs``. Under a budget in
    RSS (not a GPU's), glibc's heaps are bounded and trimmed around loads (SESSION_MEMORY_RELEASE,
    inference/runtime/residency.py; a front end's process bounds them in any case: :func:`bound_heaps`)."""
    in_rss = settings.SESSION_MEMORY_RELEASE and budget_mb > 0 and "memory" not in gpu
    if in_rss:
        residency.bound_heaps()
    return ModelRunner(
        loader,
        gpu.pop("budget_bytes", budget_mb * 1024 * 1024 // max(1, processes)),
        on_load=_observe_load,
        on_change=observability.LOADED_SESSIONS.set,
        drain_seconds=settings.VERSION_DRAIN_SECONDS,
        on_evict=_observe_eviction,
        on_charge=observability.CHARGED_BYTES.set,
        on_wait=_observe_wait,
        load_wait_seconds=settings.MODEL_LOAD_WAIT_SECONDS,
        release=residency.release_freed_memory if in_rss else None,
        first_run=settings.SESSION_FIRST_RUN,
        **gpu,
    )


def _gpu_budget(ordinal: int) -> dict:
    """A GPU worker's runner budget in GPU memory (inference/runtime/gpu_memory.py), measured with NVML when it
    is there, each version charged at least ORT_CUDA_MEM_LIMIT_MB x instances. Called after the probe session
    created the CUDA context, which the reading then holds and the budget leaves out."""
    import os

    nvml = open_nvml(ordinal, os.environ)
    total, used = (nvml.total(), nvml.used()) if nvml is not None else (0, 0)
    budget = budget_bytes(settings.WORKER_GPU_MEMORY_BUDGET_MB, total, used)
    logger.info(
        "GPU %s: %d MiB, %d MiB in use with this worker's CUDA context; sessions' budget %s",
        nvml.name() if nvml is not None else f"ordinal {ordinal}", total >> 20, used >> 20,
        f"{budget >> 20} MiB" if budget else "none (set WORKER_GPU_MEMORY_BUDGET_MB)",
    )  # fmt: skip
    per_instance = settings.ORT_CUDA_MEM_LIMIT_MB * 2**20
    memory = nvml.used if nvml is not None else (lambda: 0)
    return {"budget_bytes": budget, "memory": memory, "costs": GpuCosts(per_instance)}


def redis_client(timeout: float = 10.0):
    return redis.Redis.from_url(settings.REDIS_URL, socket_connect_timeout=3, socket_timeout=timeout)


def build_limiter() -> RateLimiter:
    """Rate limits from settings: shared through Redis when there is one."""
    defaults = Defaults(
        team=Quota(settings.RATE_LIMIT_TEAM_RPS, settings.RATE_LIMIT_TEAM_BURST, settings.RATE_LIMIT_TEAM_IN_FLIGHT),
        token=Quota(
            settings.RATE_LIMIT_TOKEN_RPS, settings.RATE_LIMIT_TOKEN_BURST, settings.RATE_LIMIT_TOKEN_IN_FLIGHT
        ),
        anonymous=Quota(
            settings.RATE_LIMIT_ANONYMOUS_RPS,
            settings.RATE_LIMIT_ANONYMOUS_BURST,
            settings.RATE_LIMIT_ANONYMOUS_IN_FLIGHT,
        ),
    )
    if settings.RATE_LIMIT_REDIS_URL:
        client = redis.Redis.from_url(settings.RATE_LIMIT_REDIS_URL, socket_connect_timeout=1, socket_timeout=2)
        return RateLimiter(defaults, RedisStore(client, lease_seconds=settings.RATE_LIMIT_LEASE_SECONDS))
    return RateLimiter(defaults, MemoryStore())


@dataclass(frozen=True)
class ServingParts:
    """A server process's collaborators, one of each, which its data plane
    and its extensions share."""

    registry: ModelRegistry
    executor: Executor
    statistics: StatisticsRecorder
    regions: RegionRegistry


_parts: ServingParts | None = None
_parts_lock = threading.Lock()


def serving_parts() -> ServingParts:
    """This server process's collaborators, built and started on first use."""
    global _parts
    with _parts_lock:
        if _parts is None:
            _parts = _build_parts()
        return _parts


def build_extensions() -> Extensions:
    """This server process's Triton extensions, over its data plane's collaborators."""
    parts = serving_parts()
    return Extensions.over(
        registry=parts.registry, executor=parts.executor, statistics=parts.statistics, regions=parts.regions,
        control_mode=settings.MODEL_CONTROL_MODE,
    )  # fmt: skip


def build_dataplane() -> DataPlane:
    """This server process's data plane, from settings."""
    parts = serving_parts()
    executor = parts.executor
    return DataPlane(
        parts.registry,
        executor,
        hosting.SERVER_NAME,
        hosting.__version__,
        statistics=parts.statistics,
        timeout_seconds=settings.INFERENCE_TIMEOUT_SECONDS,
        limiter=build_limiter(),
        payload_log=build_payload_log(),
        shared_memory=parts.regions,
        cache=build_response_cache(),
        fair=FairShare(
            settings.FAIR_QUEUE_PER_FLOW,
            weights=settings.FAIR_SHARE_WEIGHTS,
            seats=executor.seats,
            enabled=settings.FAIR_SHARE,
        ),
        shadow=ShadowSettings(
            capacity=settings.SHADOW_QUEUE,
            threads=settings.SHADOW_THREADS,
            store=DatabaseShadowRollups(),  # the comparisons, per minute (inference/shadow/rollups_db.py)
            flush_seconds=settings.CHART_FLUSH_SECONDS,
            quiet_seconds=settings.SHADOW_QUIET_MS / 1000,
            wait_seconds=settings.SHADOW_WAIT_MS / 1000,
        ),
    )


def bound_heaps() -> bool:
    """Bound glibc's heaps in an HTTP or gRPC process (SESSION_MEMORY_RELEASE;
    :func:`inference.runtime.residency.bound_heaps`): blocks under 4 MiB (a
    request's buffers) reuse freed memory instead of pages faulted in afresh
    per request (glibc's own rule: ~450 faults and +0.9 ms of CPU per gRPC
    CNN request, bench/worker_cost.py); larger ones (weights) go back when
    freed, on huge pages ``serve`` asks for. A worker bounds its heaps under
    a budget only (:func:`_runner`): its requests' tensors arrive in shared
    memory. Whether they are bounded now."""
    return settings.SESSION_MEMORY_RELEASE and residency.bound_heaps()


def _build_parts() -> ServingParts:
    """The registry (loaded, following changes), the executor (started), the statistics recorder (flushing) and
    the machine's shared-memory regions of a server process, from settings."""
    bound_heaps()
    SequenceBatcher.backlog_per_owner = settings.FAIR_SEQUENCE_BACKLOG
    registry = _registry()
    if executor_mode() == WORKERS:
        executor = RemoteExecutor(
            WorkerDirectory(redis_client(), publish_depth=settings.QUEUE_DEPTH_KEYS),
            2 * settings.MAX_REQUEST_BYTES,
            settings.WORKER_TIMEOUT_SECONDS,
            tls=deployment.worker_tls(),
            idle_seconds=settings.WORKER_IDLE_SECONDS / 2,
            connections_per_worker=settings.WORKER_CONNECTIONS_PER_PROCESS,
        )
    else:
        providers = onnx_runtime.provider_list(settings.ORT_EXECUTION_PROVIDERS, settings.ORT_DEVICE_ID, cuda_options())
        runner = _runner(
            _loader(ports.container.artifact_source, providers),
            settings.SESSION_MEMORY_BUDGET_MB,
            settings.SERVING_PROCESSES,
        )
        on_gpu = "CUDAExecutionProvider" in settings.ORT_EXECUTION_PROVIDERS
        executor = InProcessExecutor(
            runner, gpus=(settings.ORT_DEVICE_ID,) if on_gpu else (), always=settings.SESSIONS_ALWAYS_LOADED
        )
    executor.start()
    registry.add_listener(executor.on_snapshot)
    registry.add_listener(ports.container.authorizer.cache.on_registry_change, teams_only=True)
    registry.add_listener(CacheJanitor(shared_weights_dir(), "sha256").on_snapshot)
    if storage.is_remote():
        # Local copies of artifacts kept in S3: dropped when their version is deleted anywhere.
        registry.add_listener(CacheJanitor(settings.MODEL_STORE_DIR, "store").on_snapshot)
    registry.start()
    machine_statistics = Path(settings.VAR_DIR) / "run" / "statistics"  # this machine's processes' counters
    statistics = StatisticsRecorder(
        ports.container.statistics_store,
        settings.STATISTICS_FLUSH_SECONDS,
        machine_statistics,
        rollup_store=DatabaseRollups() if settings.CHART_ROLLUPS else None,  # the charts' per-minute rollups
        rollup_seconds=settings.CHART_FLUSH_SECONDS,
    )
    statistics.start()
    observability.add_exposition(TritonMetrics(statistics.machine_counters, _served_versions(registry)).render)
    observability.add_exposition(HostMetrics().render)  # Triton's nv_cpu_* metrics
    regions = RegionRegistry(Path(settings.VAR_DIR) / "run" / "shm")  # this machine's registered regions
    return ServingParts(registry, executor, statistics, regions)


def _served_versions(registry: ModelRegistry):
    """The served versions of ``registry``'s snapshot as Triton's metrics list them: (model, number, cache on)."""
    cache = settings.RESPONSE_CACHE_BYTES > 0

    def versions():
        for model in registry.models.values():
            for number, entry in model.versions.items():
                if entry.serving:
                    yield model.name, number, cache and entry.response_cache

    return versions


def build_response_cache() -> ResponseCache | None:
    """Each process's response cache (RESPONSE_CACHE_BYTES; None when 0),
    shared through RESPONSE_CACHE_REDIS_URL when it is set."""
    if settings.RESPONSE_CACHE_BYTES <= 0:
        return None
    if not settings.RESPONSE_CACHE_REDIS_URL:
        return ResponseCache(settings.RESPONSE_CACHE_BYTES)
    import redis

    from inference.response_cache_redis import SharedResponseCache

    timeout = settings.RESPONSE_CACHE_REDIS_TIMEOUT_SECONDS
    client = redis.Redis.from_url(
        settings.RESPONSE_CACHE_REDIS_URL, socket_timeout=timeout, socket_connect_timeout=timeout
    )
    return SharedResponseCache(settings.RESPONSE_CACHE_BYTES, client, settings.RESPONSE_CACHE_REDIS_TTL_SECONDS)


def build_payload_log() -> PayloadLogger | None:
    """Payload logging to PAYLOAD_LOG_SINK (None when it is empty)."""
    sink = sink_for(settings.PAYLOAD_LOG_SINK)
    return PayloadLogger(sink, settings.PAYLOAD_LOG_QUEUE) if sink is not None else None


def build_worker(device: str, providers: list, where: str = "", gpu_ordinal: int | None = None) -> WorkerRuntime:
    """The runtime of an inference worker pinned to ``device`` (registry
    followed, sessions on the device's providers, artifacts cached under
    WORKER_CACHE_DIR and dropped when their version is deleted). Validation
    tasks this process runs use the same providers and cache (``where``
    describes the worker in the versions' logs). ``gpu_ordinal``: a worker
    on its GPU (its probe passed): the budget counts GPU memory."""
    SequenceBatcher.backlog_per_owner = settings.FAIR_SEQUENCE_BACKLOG
    validating.configure(
        validating.Validator(
            where or f"the {device} worker", tuple(providers), settings.WORKER_CACHE_DIR, _sharing(providers)
        )
    )
    registry = _registry()
    runner = _runner(
        _loader(StoreArtifacts(settings.WORKER_CACHE_DIR), providers),
        settings.WORKER_MEMORY_BUDGET_MB,
        **(_gpu_budget(gpu_ordinal) if gpu_ordinal is not None else {}),
    )
    cpu = settings.WORKER_CPU_INSTANCES or cpu_instances(settings.ORT_INTRA_OP_THREADS)
    always, shadow_wait = settings.SESSIONS_ALWAYS_LOADED, settings.SHADOW_WAIT_MS / 1000
    runtime = WorkerRuntime(device, runner, registry, cpu_instances=cpu, always=always, shadow_wait_seconds=shadow_wait)
    registry.add_listener(runtime.on_snapshot)
    registry.add_listener(CacheJanitor(settings.WORKER_CACHE_DIR, "sha256").on_snapshot)
    registry.add_listener(CacheJanitor(shared_weights_dir(), "sha256").on_snapshot)
    registry.start()
    return runtime
