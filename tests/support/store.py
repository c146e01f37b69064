"""Helpers for model store tests: staged uploads, people."""

from __future__ import annotations

import hashlib

from django.db import transaction
from django.utils import timezone

from models_store import storage
from models_store.accounts import services as accounts
from models_store.intake.uploads import StagedFile
from models_store.registry.models import ModelVersion
from models_store.stamp import bump_stamp

PASSWORD = "Correct-horse-battery-9"  # test accounts only


def stage(payload: bytes, filename: str = "model.onnx") -> StagedFile:
    """What StagingUploadHandler leaves after receiving ``payload``."""
    directory = storage.new_staging_dir("upload-")
    path = directory / storage.MODEL_FILENAME
    path.write_bytes(payload)
    return StagedFile(path, hashlib.sha256(payload).hexdigest(), len(payload), filename, "application/octet-stream")


def person(username: str, *teams: str, superuser: bool = False):
    """A user with PASSWORD in ``teams`` (created when missing)."""
    return accounts.user_create(username=username, password=PASSWORD, teams=list(teams), superuser=superuser)


def force_state(version, state: str, reason: str = "") -> None:
    """Set ``version``'s state behind the state machine's back (a test's stand-in
    for a version whose file broke, or came back), bumping the change stamp as
    every registry write does."""
    with transaction.atomic():
        ModelVersion.objects.filter(pk=version.pk).update(state=state, reason=reason, updated_at=timezone.now())
        bump_stamp()
