"""The worker execution mode (``INFERENCE_EXECUTOR=celery`` with ``REDIS_URL``).

The front end sends each inference as a Celery task (serializer
``modelhost``, see wire.py) to the queue of a device that hosts the model and
has a live worker, then waits on a per-request Redis list for the answer,
encoded the same way. Errors come back as protocol error codes and are raised
again here, so every transport answers exactly as in process.

Faults: no live worker for the model's devices -> UNAVAILABLE at once; a
worker that dies while holding the request -> UNAVAILABLE once its heartbeat
expires (about 5 s), within the deadline; no answer before the deadline
-> DEADLINE_EXCEEDED; Redis unreachable -> UNAVAILABLE.
"""

from __future__ import annotations

import time
import uuid

import numpy as np

from inference.protocol import errors
from inference.runtime import wire
from inference.runtime.placement import LiveQueues, allowed_queues, describe_group

RESULT_PREFIX = "modelhost:result:"
TASK_NAME = "modelhost.infer"
_POLL_SECONDS = 0.25

_ERRORS = {cls.code: cls for cls in (
    errors.InvalidInput, errors.ModelNotFound, errors.ModelNotReady, errors.RequestTooLarge,
    errors.DeadlineExceeded, errors.Unsupported, errors.Unauthenticated, errors.PermissionDenied,
)}  # fmt: skip


def raise_remote(error: dict) -> None:
    """Raise the protocol error a worker reported."""
    cls = _ERRORS.get(error.get("code"), errors.InferenceError)
    raise cls(error.get("message", "the worker failed"))


class CeleryExecutor:
    """Runs inferences on pinned workers through Celery and Redis."""

    def __init__(self, celery_app, redis_client, registry, default_timeout: float = 30.0):
        self.app = celery_app
        self.redis = redis_client
        self.registry = registry
        self.default_timeout = default_timeout
        self.live = LiveQueues(redis_client)

    def start(self) -> None:
        self.live.start()

    def on_snapshot(self, snapshot: dict) -> None:
        """Sessions live in the workers; they follow the registry themselves."""

    def run(
        self,
        entry,
        feeds: dict[str, np.ndarray],
        output_names: list[str],
        deadline: float | None = None,
        parameters: dict | None = None,
    ) -> list[np.ndarray]:
        """Send the inference to a worker and wait for its outputs (see module doc)."""
        if deadline is None:
            deadline = time.monotonic() + self.default_timeout
        live = self.live.snapshot()
        model = self.registry.models.get(entry.model_name)
        group = model.instance_group if model else ()
        queues = allowed_queues(group, live)
        if not queues:
            why = self.live.error or f"no live worker serves {describe_group(group)}"
            raise errors.ModelNotReady(f"model '{entry.model_name}' cannot run now: {why}")
        queue = self.live.pick(entry.key, queues)
        task_id = uuid.uuid4().hex
        reply = RESULT_PREFIX + task_id
        payload = {
            "model": entry.model_name,
            "version": entry.number,
            "sha256": entry.sha256,
            "artifact": entry.artifact,
            "size": entry.size,
            "inputs": feeds,
            "outputs": output_names,
            "deadline": time.time() + (deadline - time.monotonic()),
            "reply": reply,
        }
        try:
            self.app.send_task(
                TASK_NAME,
                args=[payload],
                queue=queue,
                task_id=task_id,
                serializer="modelhost",
                ignore_result=True,
                # Celery would otherwise repr() the tensors for its message headers.
                argsrepr=f"[{entry.model_name}:{entry.number}]",
                kwargsrepr="{}",
            )
        except Exception as exc:
            raise errors.ModelNotReady(f"cannot reach the worker queue {queue} (Redis unreachable?): {exc}") from None
        return self._wait(reply, queue, deadline)

    def _wait(self, reply: str, queue: str, deadline: float) -> list[np.ndarray]:
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self.redis.delete(reply)
                raise errors.DeadlineExceeded(f"no answer from the {queue} worker before the request's deadline")
            try:
                item = self.redis.blpop([reply], timeout=min(_POLL_SECONDS, remaining))
            except Exception as exc:
                raise errors.ModelNotReady(f"lost the connection to Redis while waiting for {queue}: {exc}") from None
            if item is not None:
                result = wire.loads(item[1])
                if "error" in result:
                    raise_remote(result["error"])
                return result["outputs"]
            if queue not in self.live.snapshot():
                raise errors.ModelNotReady(
                    f"the worker on {queue} stopped before answering (no live worker left on that queue)"
                )
