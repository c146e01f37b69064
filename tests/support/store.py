"""Helpers for model store tests: staged uploads, people."""

from __future__ import annotations

import hashlib

from models_store import storage
from models_store.accounts import services as accounts
from models_store.intake.uploads import StagedFile

PASSWORD = "Correct-horse-battery-9"  # test accounts only


def stage(payload: bytes, filename: str = "model.onnx") -> StagedFile:
    """What StagingUploadHandler leaves after receiving ``payload``."""
    directory = storage.new_staging_dir("upload-")
    path = directory / storage.MODEL_FILENAME
    path.write_bytes(payload)
    return StagedFile(path, hashlib.sha256(payload).hexdigest(), len(payload), filename, "application/octet-stream")


def person(username: str, *teams: str, superuser: bool = False):
    """A user with PASSWORD in ``teams`` (created when missing)."""
    return accounts.user_create(username, PASSWORD, teams=list(teams), superuser=superuser)
