"""``manage.py serve``: migrate, import a model repository, and serve.

REST (V2 and TF Serving) runs in granian, a Rust HTTP server driving the
Django WSGI application (HTTP_WORKERS processes x HTTP_THREADS threads;
chosen by measurement, see bench/README.md); with ``--grpc-port`` the gRPC
server runs as a second child (``manage.py rungrpc``). Both read the same
registry. This process supervises them (hosting/processes/supervisor.py): SIGTERM or
SIGINT stops both cleanly; a child that crashes is restarted.

Triton's options (hosting/triton_flags.py, docs/command-line.md): the model
control modes (models_store/intake/model_control.py; ``poll`` reads the
repository again on a timer of this process), ``--load-model``,
``--strict-model-config``, ``--exit-on-error``, the log options (written to
the machine's runtime log settings before the servers start), the bind
addresses.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError
from django.db import connections

from hosting import triton_flags
from hosting.composition import IN_PROCESS, WORKERS, executor_mode
from hosting.deployment import DeploymentError, check_worker_mode
from hosting.processes import affinity, granian_logging, metrics_port
from hosting.processes.supervisor import Child, Supervisor
from inference import runtime_settings
from inference.protocol.errors import InvalidInput
from inference.runtime import residency
from models_store import maintenance
from models_store.intake import model_control, validating
from models_store.intake.repository import import_repository


def _check_executor() -> None:
    """Worker mode needs Redis, one SECRET_KEY and, if set, TLS files that
    load: a clear error at start-up, not failing requests."""
    mode = executor_mode()
    if mode == IN_PROCESS:
        return
    if mode != WORKERS:
        raise CommandError(f"INFERENCE_EXECUTOR must be inprocess or workers, not {settings.INFERENCE_EXECUTOR!r}")
    if not settings.REDIS_URL:
        raise CommandError("INFERENCE_EXECUTOR=workers needs REDIS_URL (e.g. redis://127.0.0.1:6379/0)")
    try:
        check_worker_mode()
    except DeploymentError as exc:
        raise CommandError(str(exc)) from None
    import redis

    try:
        redis.Redis.from_url(settings.REDIS_URL, socket_connect_timeout=3).ping()
    except redis.RedisError as exc:
        raise CommandError(f"Redis at {settings.REDIS_URL} is unreachable: {exc}") from None


#: PostgreSQL advisory lock key held while migrating, so that replicas starting
#: together (Kubernetes) migrate one after the other.
MIGRATION_LOCK = 0x6D6F64656C  # "model"


def migrate() -> None:
    """Apply migrations; on PostgreSQL under an advisory lock, so that several
    front ends starting at once do not migrate concurrently."""
    connection = connections["default"]
    if connection.vendor != "postgresql":
        call_command("migrate", interactive=False, verbosity=0)
        return
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_lock(%s)", [MIGRATION_LOCK])
        try:
            call_command("migrate", interactive=False, verbosity=0)
        finally:
            cursor.execute("SELECT pg_advisory_unlock(%s)", [MIGRATION_LOCK])


def _fresh_metrics_dir() -> Path:
    """An empty directory for Prometheus multiprocess files of this run."""
    path = Path(os.environ.get("PROMETHEUS_MULTIPROC_DIR") or Path(settings.VAR_DIR) / "metrics")
    if path.exists():
        shutil.rmtree(path)
    path.mkdir(parents=True)
    return path


def _metrics_process_dead(pid: int) -> None:
    from prometheus_client import multiprocess

    multiprocess.mark_process_dead(pid, os.environ.get("PROMETHEUS_MULTIPROC_DIR"))


class Command(BaseCommand):
    help = "Migrate, import --model-repository, and serve V2 REST (and gRPC with --grpc-port)."

    def add_arguments(self, parser):
        parser.add_argument(
            "--model-repository", "--model-store", type=Path, help="Triton-style repository to import first"
        )
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--http-port", type=int, default=8000)
        parser.add_argument("--grpc-port", type=int, default=None, help="also serve gRPC on this port")
        parser.add_argument("--workers", type=int, default=settings.HTTP_WORKERS, help="HTTP server processes")
        parser.add_argument("--threads", type=int, default=settings.HTTP_THREADS, help="threads per HTTP process")
        triton_flags.add_arguments(parser)  # --model-control-mode, --load-model, ... (Triton's)
        parser.add_argument("--metrics-port", type=int, default=8002, help="Triton's metrics port (/metrics)")
        parser.add_argument(
            "--allow-metrics", type=triton_flags.boolean, nargs="?", const=True, default=True, metavar="BOOL",
            help="Triton's: false turns metrics off (the metrics port and /metrics)",
        )  # fmt: skip

    def _start_models(self, options: dict, control: triton_flags.ModelControl):
        """Import the repository and load the models the control mode starts
        with; the repository poll (not started) in ``poll`` mode, else None.
        Raises CommandError (--exit-on-error: a model that failed, an unknown
        --load-model)."""
        repository, poll, results = options["model_repository"], None, []
        sharing = validating.current_validator().sharing  # big models' shared copies written as they import
        if repository is not None:
            try:
                if control.mode == model_control.POLL:
                    poll = model_control.RepositoryPoll(repository, strict=control.strict, sharing=sharing)
                    results = poll.run()
                else:
                    results = import_repository(repository, strict=control.strict, sharing=sharing)
            except FileNotFoundError as exc:
                raise CommandError(str(exc)) from None
            for result in results:
                self.stdout.write(str(result))
        wanted = control.load if control.mode == model_control.EXPLICIT else ()
        unknown = model_control.unknown_models(wanted)
        everything = not wanted or model_control.ALL in wanted
        failed = [r for r in results if r.outcome == "failed" and (everything or r.model in wanted)]
        problems = [f"{r.model}: {r.message}" for r in failed] + [f"--load-model {n}: no such model" for n in unknown]
        if problems and control.exit_on_error:
            raise CommandError("models failed to load (--exit-on-error):\n  " + "\n  ".join(problems))
        for name in unknown:
            self.stderr.write(f"warning: --load-model {name}: no such model")
        if control.mode:
            gone = poll.removed() if poll else ()
            loaded = model_control.load_at_start(mode=control.mode, names=wanted, exclude=gone)
            self.stdout.write(f"model control mode {control.mode}: loaded {', '.join(loaded) or 'no model'}")
        return poll

    def handle(self, *args, **options):
        control = triton_flags.model_control(options, default_mode=settings.MODEL_CONTROL_MODE)
        for warning in control.warnings:
            self.stderr.write(f"warning: {warning}")
        _check_executor()
        if error := affinity.unknown_mode("HTTP_CPU_AFFINITY", "GRPC_CPU_AFFINITY"):
            raise CommandError(error)
        migrate()
        log = triton_flags.log_settings(options)
        if log:
            try:
                runtime_settings.runtime_settings().update_log(log)  # every process of the machine
            except InvalidInput as exc:
                raise CommandError(str(exc)) from None
        poll = self._start_models(options, control)
        connections.close_all()
        host = options["host"]
        http_host, grpc_host = options["http_address"] or host, options["grpc_address"] or host
        base = str(settings.BASE_DIR)
        env = dict(
            os.environ,
            DJANGO_SETTINGS_MODULE=os.environ.get("DJANGO_SETTINGS_MODULE", "hosting.settings"),
            PROMETHEUS_MULTIPROC_DIR=str(_fresh_metrics_dir()),
            HTTP_THREADS=str(options["threads"]),  # the work slots of hosting/body_gate.py
            MODEL_CONTROL_MODE=control.mode,  # the repository extension refuses load/unload in none and poll
            METRICS_ENABLED=str(options["allow_metrics"]).lower(),
        )
        if settings.SESSION_MEMORY_RELEASE:  # heaps bounded (hosting/composition.py: bound_heaps)
            env.update(residency.allocator_environment(env))  # huge pages for the blocks glibc maps
        http = [
            sys.executable, "-m", "granian", "--interface", "wsgi", "--http", "1", "--no-ws",
            "--host", http_host, "--port", str(options["http_port"]),
            "--workers", str(options["workers"]),
            "--blocking-threads", str(options["threads"] + settings.HTTP_BODY_THREADS),
            "--runtime-threads", "1", "--backlog", "2048",
            "--log-level", settings.LOG_LEVEL.lower(), "--respawn-failed-workers",
            "--log-config", str(granian_logging.write(Path(settings.VAR_DIR) / "run" / "granian-logging.json")),
            "hosting.wsgi:application",
        ]  # fmt: skip
        # No --workers-kill-timeout: granian 2.8 then checks a worker 1 ms after its exit is signalled (the
        # worker's sentinel pipe closes), often before the worker can be reaped, and logs "Killing worker-N
        # after it refused to gracefully stop" for a worker that exited 0. A worker that really hangs is killed
        # with its process group by the supervisor's grace period (hosting/processes/supervisor.py).
        ready_file = None
        grpc_processes = settings.GRPC_PROCESSES if options["grpc_port"] is not None else 0
        env["SERVING_PROCESSES"] = str(options["workers"] + grpc_processes)  # they share SESSION_MEMORY_BUDGET_MB
        env["GRPC_EXPERIMENTS"] = settings.GRPC_EXPERIMENTS  # grpc core's, from the gRPC processes' start
        if options["grpc_port"] is not None:  # ready means both transports listen
            ready_file = Path(settings.VAR_DIR) / "run" / f"grpc-{options['grpc_port']}.ready"
            ready_file.unlink(missing_ok=True)
            env["GRPC_READY_FILE"] = str(ready_file)
        children = [Child("http", http, env, base)]
        self.stdout.write(f"serving V2 REST on http://{http_host}:{options['http_port']}")
        self.stdout.write(
            f"HTTP: {options['workers']} process(es), each running at most {options['threads']} requests at once "
            f"(HTTP_THREADS) and holding up to {settings.HTTP_BODY_THREADS} more threads that only wait for "
            "request bodies (HTTP_BODY_THREADS, hosting/body_gate.py)"
        )
        if options["grpc_port"] is not None:
            grpc = [sys.executable, "manage.py", "rungrpc", "--host", grpc_host, "--port", str(options["grpc_port"])]
            children.append(Child("grpc", grpc, env, base))
            self.stdout.write(f"serving V2 gRPC on {grpc_host}:{options['grpc_port']}")
        self.stdout.flush()

        def on_exit(pid: int) -> None:
            _metrics_process_dead(pid)
            if ready_file is not None and pid == children[-1].process.pid:
                ready_file.unlink(missing_ok=True)  # not ready until gRPC listens again

        upkeep = maintenance.start()  # the reaper and the cleanup of interrupted uploads, on a timer
        rollouts = maintenance.start_rollouts()  # the steps of progressive rollouts judged when due
        polling = maintenance.start_repository_poll(poll.run, control.poll_seconds) if poll else None
        metrics = metrics_port.start(options, self.stdout)  # hosting/processes/metrics_port.py
        try:
            failed = Supervisor(children, on_exit=on_exit).run() != 0
        finally:
            if metrics is not None:
                metrics.stop()
            upkeep.stop()
            rollouts.stop()
            if polling is not None:
                polling.stop()
        if failed:
            raise CommandError("a server process kept failing; see the log above")
