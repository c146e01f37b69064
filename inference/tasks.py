"""Celery tasks of the inference app (thin: the work is in runtime/worker.py)."""

from __future__ import annotations

from celery import shared_task

from inference.runtime import worker
from inference.runtime.celery_executor import TASK_NAME


@shared_task(name=TASK_NAME, ignore_result=True)
def infer(payload: dict) -> None:
    """Run one inference on this worker's device and push the answer to
    ``payload["reply"]`` (wire format)."""
    runtime = worker.runtime
    if runtime is None:  # a worker started without runworker's set-up
        raise RuntimeError("modelhost.infer runs only in `manage.py runworker`")
    runtime.reply(payload["reply"], runtime.infer(payload))
