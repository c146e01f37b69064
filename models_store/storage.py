"""The artifact store under MODEL_STORE_DIR, content-addressed by sha256.

A version's files live in ``<model>/<sha256>/`` (``model.onnx`` plus any
external-data files at their relative paths). Files are copied into a
temporary directory inside the store, fsynced, and renamed into place in one
step, so a crash never leaves a half-written artifact under its final name.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings

MODEL_FILENAME = "model.onnx"
_CHUNK = 1 << 20


@dataclass(frozen=True)
class StoredArtifact:
    relpath: str  # relative to MODEL_STORE_DIR, e.g. "iris/<sha256>/model.onnx"
    sha256: str
    size: int  # bytes, model file plus external data


def store_root() -> Path:
    root = Path(settings.MODEL_STORE_DIR)
    root.mkdir(parents=True, exist_ok=True)
    return root


def artifact_path(relpath: str) -> Path:
    """Absolute path of a stored artifact."""
    return store_root() / relpath


def digest_files(files: list[Path]) -> tuple[str, int]:
    """sha256 over the files' bytes in order, and their total size."""
    digest = hashlib.sha256()
    size = 0
    for path in files:
        with open(path, "rb") as handle:
            while chunk := handle.read(_CHUNK):
                digest.update(chunk)
                size += len(chunk)
    return digest.hexdigest(), size


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def store_files(model_name: str, model_file: Path, extra_files: list[Path] = ()) -> StoredArtifact:
    """Copy a model file (and external data files beside it) into the store.

    The sha256 covers the model file then the extra files in order (for a
    model without external data it is ``sha256sum model.onnx``). Storing the
    same content twice is a no-op returning the same artifact.
    """
    files = [model_file, *extra_files]
    sha256, size = digest_files(files)
    root = store_root()
    final_dir = root / model_name / sha256
    relpath = f"{model_name}/{sha256}/{MODEL_FILENAME}"
    if (final_dir / MODEL_FILENAME).is_file():
        return StoredArtifact(relpath, sha256, size)
    tmp_parent = root / ".tmp"
    tmp_parent.mkdir(exist_ok=True)
    tmp_dir = Path(tempfile.mkdtemp(prefix=f"{model_name}-", dir=tmp_parent))
    try:
        for index, source in enumerate(files):
            target = tmp_dir / (MODEL_FILENAME if index == 0 else source.relative_to(model_file.parent.resolve()))
            target.parent.mkdir(parents=True, exist_ok=True)
            with open(source, "rb") as src, open(target, "wb") as dst:
                shutil.copyfileobj(src, dst, _CHUNK)
                dst.flush()
                os.fsync(dst.fileno())
        _fsync_dir(tmp_dir)
        final_dir.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.rename(tmp_dir, final_dir)
        except OSError:
            if not (final_dir / MODEL_FILENAME).is_file():  # not a concurrent store of the same bytes
                raise
        _fsync_dir(final_dir.parent)
    finally:
        if tmp_dir.exists():
            shutil.rmtree(tmp_dir, ignore_errors=True)
    return StoredArtifact(relpath, sha256, size)


def remove_artifact(relpath: str) -> None:
    """Delete a stored artifact's directory (after its version row is gone)."""
    directory = artifact_path(relpath).parent
    if directory.is_dir() and directory.parent.parent == store_root():
        shutil.rmtree(directory, ignore_errors=True)


def copy_artifact(relpath: str, target_dir: Path) -> Path:
    """Copy a stored artifact's files (model and external data) into
    ``target_dir`` (atomically: a temporary sibling renamed into place);
    returns the local model path. Used by workers to cache artifacts by sha256."""
    target_dir = Path(target_dir)
    model_path = target_dir / MODEL_FILENAME
    if model_path.is_file():
        return model_path
    source = artifact_path(relpath).parent
    target_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".fetch-", dir=target_dir.parent))
    try:
        shutil.copytree(source, tmp, dirs_exist_ok=True)
        try:
            os.rename(tmp, target_dir)
        except OSError:
            if not model_path.is_file():
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return model_path
