"""``manage.py rungrpc``: the OIP gRPC server alone, on the same registry.

With ``--processes N`` (default GRPC_PROCESSES) N server processes share the
port (SO_REUSEPORT), supervised like ``serve``'s children.
"""

import os
import sys

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from hosting.processes import affinity
from hosting.processes.supervisor import Child, Supervisor


class Command(BaseCommand):
    help = "Serve the Open Inference Protocol over gRPC (inference.GRPCInferenceService)."

    def add_arguments(self, parser):
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=8001)
        parser.add_argument("--processes", type=int, default=settings.GRPC_PROCESSES)
        parser.add_argument("--threads", type=int, default=settings.GRPC_THREADS, help="worker mode only")

    def handle(self, *args, host, port, processes, threads, **options):
        if processes < 1:
            raise CommandError("--processes must be at least 1")
        if settings.GRPC_EVENT_LOOP not in ("uvloop", "asyncio"):
            raise CommandError(f"GRPC_EVENT_LOOP must be uvloop or asyncio, not {settings.GRPC_EVENT_LOOP!r}")
        if error := affinity.unknown_mode("GRPC_CPU_AFFINITY"):
            raise CommandError(error)
        # grpc core reads its experiments when it starts, which is after this (no server or channel yet),
        # and the children inherit them.
        os.environ["GRPC_EXPERIMENTS"] = settings.GRPC_EXPERIMENTS
        self.stdout.write(f"serving OIP gRPC on {host}:{port} ({processes} process(es))")
        self.stdout.flush()
        if processes == 1:
            # Imported here: loading the command must not register the inference.*
            # protobuf names (tritonclient, in test processes, registers them too).
            from inference.dataplane import get_dataplane
            from inference.grpc.server import serve_forever

            if settings.GRPC_CPU_AFFINITY == "soft":
                get_dataplane()  # loading the models is not confined to one CPU
                affinity.start("grpc", offset=settings.HTTP_WORKERS)
            serve_forever(f"{host}:{port}", threads)
            return
        argv = [sys.executable, "manage.py", "rungrpc", "--host", host, "--port", str(port), "--processes", "1",
                "--threads", str(threads)]  # fmt: skip
        children = [Child(f"grpc-{i}", argv, dict(os.environ), str(settings.BASE_DIR)) for i in range(processes)]
        if Supervisor(children).run() != 0:
            raise CommandError("a gRPC server process kept failing")
