"""The transport floor: ``serve``'s own servers answering fixed bytes.

bench/fixed_answer.py in granian (REST, the same options as ``serve``) and
in grpc.aio processes sharing a port (gRPC), answering the bytes ``serve``
itself answered (:func:`capture_answers`). What ``serve`` takes beyond it
is what our application costs (bench/profile_hot_path.py).
"""

from __future__ import annotations

import os
import subprocess
import sys
import urllib.request
from pathlib import Path

from bench.targets import ROOT, ProcessTarget, ServeTarget
from bench.workloads import GRPC_INFER_PATH, Request


class FixedAnswerTarget(ProcessTarget):
    """bench/fixed_answer.py in granian (REST) and grpc.aio (gRPC), configured like ``serve``:
    ``workers`` x ``threads`` HTTP, ``grpc_processes`` gRPC processes run with grpc core's
    ``grpc_experiments`` (GRPC_EXPERIMENTS; None: grpcio's defaults, the variable unset)."""

    transports = ("rest-binary", "grpc")
    ours = False

    def __init__(self, work: Path, workers: int, threads: int, grpc_processes: int, rest_answer: tuple[bytes, str],
                 grpc_answer: bytes, grpc_experiments: str | None, name: str = "fixed answer"):  # fmt: skip
        slug = name.replace(" ", "-").replace("(", "").replace(")", "")
        super().__init__(name, work / f"{slug}.log")
        self.work, self.slug = work, slug
        self.workers, self.threads, self.grpc_processes = workers, threads, grpc_processes
        self.grpc_experiments = grpc_experiments
        (work / f"{slug}-rest-answer.bin").write_bytes(rest_answer[0])
        (work / f"{slug}-grpc-answer.bin").write_bytes(grpc_answer)
        self.header_length = rest_answer[1]
        self.grpc_children: list[subprocess.Popen] = []

    def start(self) -> None:
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        env.pop("GRPC_EXPERIMENTS", None)
        rest_env = dict(env, FIXED_ANSWER_FILE=str(self.work / f"{self.slug}-rest-answer.bin"),
                        FIXED_ANSWER_HEADER_LENGTH=self.header_length)  # fmt: skip
        command = [
            sys.executable, "-m", "granian", "--interface", "wsgi", "--http", "1", "--no-ws",
            "--host", "127.0.0.1", "--port", str(self.http_port),
            "--workers", str(self.workers), "--blocking-threads", str(self.threads),
            "--runtime-threads", "1", "--backlog", "2048", "--log-level", "warning",
            "bench.fixed_answer:application",
        ]  # fmt: skip
        self.process = self.spawn(command, rest_env, ROOT, self.log_path)
        grpc_env = dict(env, FIXED_ANSWER_FILE=str(self.work / f"{self.slug}-grpc-answer.bin"))
        if self.grpc_experiments is not None:  # as serve's gRPC processes run them (docs/configuration.md)
            grpc_env["GRPC_EXPERIMENTS"] = self.grpc_experiments
        self.grpc_children = [
            self.spawn(
                [sys.executable, "-m", "bench.fixed_answer", "--grpc-port", str(self.grpc_port)],
                grpc_env,
                ROOT,
                self.work / f"{self.slug}-grpc-{i}.log",
            )
            for i in range(self.grpc_processes)
        ]
        self.wait_ready(60, ready_path="/")

    def stop(self) -> None:
        for child in self.grpc_children:
            self.terminate(child)
        super().stop()


def capture_answers(serve: ServeTarget, rest: Request, grpc_message: bytes) -> tuple[tuple[bytes, str], bytes]:
    """serve's real answers to the two requests (REST: body and header length; gRPC: the message)."""
    import grpc

    http = urllib.request.Request(serve.base_url + rest.path, data=rest.body, headers=rest.headers, method="POST")
    with urllib.request.urlopen(http, timeout=30) as response:
        rest_answer = (response.read(), response.headers["Inference-Header-Content-Length"])
    with grpc.insecure_channel(serve.grpc_address) as channel:
        grpc_answer = channel.unary_unary(GRPC_INFER_PATH)(grpc_message, timeout=30)
    return rest_answer, grpc_answer
