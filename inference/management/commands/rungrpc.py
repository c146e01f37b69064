"""``manage.py rungrpc``: the OIP gRPC server alone, on the same registry."""

from django.conf import settings
from django.core.management.base import BaseCommand

from inference.grpc.server import serve_forever


class Command(BaseCommand):
    help = "Serve the Open Inference Protocol over gRPC (inference.GRPCInferenceService)."

    def add_arguments(self, parser):
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=8001)
        parser.add_argument("--threads", type=int, default=settings.GRPC_THREADS)

    def handle(self, *args, host, port, threads, **options):
        self.stdout.write(f"serving OIP gRPC on {host}:{port}")
        self.stdout.flush()
        serve_forever(f"{host}:{port}", threads)
