"""``manage.py grpc_health --port 8001``: exit 0 when the gRPC server answers
ServerReady with ready, 1 otherwise (a container health check)."""

import grpc
from django.core.management.base import BaseCommand, CommandError


class Command(BaseCommand):
    help = "Health check of the gRPC server (ServerReady)."

    def add_arguments(self, parser):
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=8001)
        parser.add_argument("--timeout", type=float, default=3.0)

    def handle(self, *args, host, port, timeout, **options):
        # Imported here: loading the command (e.g. to parse its arguments) must not
        # register the inference.* protobuf names (tritonclient registers them too).
        from inference.grpc.proto import oip_pb2, oip_pb2_grpc

        with grpc.insecure_channel(f"{host}:{port}") as channel:
            try:
                ready = oip_pb2_grpc.GRPCInferenceServiceStub(channel).ServerReady(
                    oip_pb2.ServerReadyRequest(), timeout=timeout
                )
            except grpc.RpcError as exc:
                raise CommandError(f"gRPC server at {host}:{port}: {exc.code().name}") from None
        if not ready.ready:
            raise CommandError("gRPC server is not ready")
        self.stdout.write("ready")
