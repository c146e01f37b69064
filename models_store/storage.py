"""The artifact store under MODEL_STORE_DIR, content-addressed by sha256.

A version's files live in ``<model>/<sha256>/`` (``model.onnx`` plus any
external-data files at their relative paths). Files are written into a
staging directory under ``.tmp/`` inside the store (same file system),
fsynced, and renamed into place in one step, so a crash never leaves a
half-written artifact under its final name. What a crash can leave behind
(a staging directory, an artifact whose version row never committed) is
listed by :func:`find_orphans` and removed by ``manage.py cleanup_store``.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings

MODEL_FILENAME = "model.onnx"
STAGING_DIRNAME = ".tmp"
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


def new_staging_dir(prefix: str) -> Path:
    """A new empty directory under ``MODEL_STORE_DIR/.tmp`` for files on their way into the store."""
    staging = store_root() / STAGING_DIRNAME
    staging.mkdir(exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=prefix, dir=staging))


def _move_into_place(tmp_dir: Path, model_name: str, sha256: str) -> None:
    """Rename a complete, fsynced staging directory to ``<model>/<sha256>``.

    The files must already be fsynced; the directory entries are fsynced
    here. When the final directory already holds the model file (the same
    bytes stored before, or concurrently) the staging directory is dropped.
    """
    final_dir = store_root() / model_name / sha256
    try:
        if (final_dir / MODEL_FILENAME).is_file():
            return
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


def store_files(model_name: str, model_file: Path, extra_files: list[Path] = ()) -> StoredArtifact:
    """Copy a model file (and external data files beside it) into the store.

    The sha256 covers the model file then the extra files in order (for a
    model without external data it is ``sha256sum model.onnx``). Storing the
    same content twice is a no-op returning the same artifact.
    """
    files = [model_file, *extra_files]
    sha256, size = digest_files(files)
    relpath = f"{model_name}/{sha256}/{MODEL_FILENAME}"
    if (store_root() / relpath).is_file():
        return StoredArtifact(relpath, sha256, size)
    tmp_dir = new_staging_dir(f"{model_name}-")
    try:
        for index, source in enumerate(files):
            target = tmp_dir / (MODEL_FILENAME if index == 0 else source.relative_to(model_file.parent.resolve()))
            target.parent.mkdir(parents=True, exist_ok=True)
            with open(source, "rb") as src, open(target, "wb") as dst:
                shutil.copyfileobj(src, dst, _CHUNK)
                dst.flush()
                os.fsync(dst.fileno())
    except BaseException:
        shutil.rmtree(tmp_dir, ignore_errors=True)
        raise
    _move_into_place(tmp_dir, model_name, sha256)
    publish(f"{model_name}/{sha256}/{MODEL_FILENAME}")
    return StoredArtifact(relpath, sha256, size)


def commit_staged(model_name: str, staging_dir: Path, sha256: str, size: int) -> StoredArtifact:
    """Move a staging directory holding a fsynced ``model.onnx`` (whose
    sha256 and size the caller measured while writing it) into the store."""
    _move_into_place(staging_dir, model_name, sha256)
    publish(f"{model_name}/{sha256}/{MODEL_FILENAME}")
    return StoredArtifact(f"{model_name}/{sha256}/{MODEL_FILENAME}", sha256, size)


def remove_artifact(relpath: str) -> None:
    """Remove an artifact here and from the storage backend (the local copy
    first: when the backend is away, only its object is left for the cleanup)."""
    _remove_local(relpath)
    _unpublish(relpath)


def _unpublish(relpath: str) -> None:
    backend = _backend()
    if _is_local_store(backend):
        return
    for key in _backend_files(backend, relpath.rsplit("/", 1)[0]):
        backend.delete(key)


def _remove_local(relpath: str) -> None:
    """Delete a stored artifact's directory (after its version row is gone)."""
    directory = artifact_path(relpath).parent
    if directory.is_dir() and directory.parent.parent == store_root():
        shutil.rmtree(directory, ignore_errors=True)
        try:
            directory.parent.rmdir()  # the model's directory, when that was its last artifact
        except OSError:
            pass


def _backend():
    """The Django storage backend that keeps artifacts for every machine."""
    from django.core.files.storage import storages

    return storages["models"]


def _is_local_store(backend) -> bool:
    """True when the backend is MODEL_STORE_DIR itself (nothing to publish or fetch)."""
    from django.core.files.storage import FileSystemStorage

    return isinstance(backend, FileSystemStorage) and Path(backend.location).resolve() == store_root().resolve()


def is_remote() -> bool:
    """True when artifacts live in a storage backend other than
    MODEL_STORE_DIR (S3): MODEL_STORE_DIR then holds local copies only."""
    return not _is_local_store(_backend())


def publish(relpath: str) -> None:
    """Copy a locally stored artifact's files to the storage backend (a no-op
    for the filesystem default), before its version row commits."""
    from django.core.files import File

    backend = _backend()
    if _is_local_store(backend):
        return
    directory = artifact_path(relpath).parent
    prefix = relpath.rsplit("/", 1)[0]
    for path in sorted(p for p in directory.rglob("*") if p.is_file()):
        key = f"{prefix}/{path.relative_to(directory).as_posix()}"
        if not backend.exists(key):
            with open(path, "rb") as handle:
                backend.save(key, File(handle))


def _backend_files(backend, prefix: str) -> list[str]:
    directories, files = backend.listdir(prefix)
    keys = [f"{prefix}/{name}" for name in files]
    for directory in directories:
        keys += _backend_files(backend, f"{prefix}/{directory}")
    return keys


def copy_artifact(relpath: str, target_dir: Path) -> Path:
    """The artifact's files (model and external data) in ``target_dir``:
    copied from this machine's store when it has them, else downloaded from
    the storage backend. Atomic (a temporary sibling renamed into place);
    returns the local model path. Workers cache artifacts this way by sha256,
    so they need no shared disk. Raises FileNotFoundError for a missing artifact."""
    target_dir = Path(target_dir)
    model_path = target_dir / MODEL_FILENAME
    if model_path.is_file():
        return model_path
    target_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".fetch-", dir=target_dir.parent))
    try:
        source = artifact_path(relpath).parent
        backend = _backend()
        if (source / MODEL_FILENAME).is_file():
            shutil.copytree(source, tmp, dirs_exist_ok=True)
        elif _is_local_store(backend):
            raise FileNotFoundError(f"artifact {relpath} is not in the model store")
        else:
            prefix = relpath.rsplit("/", 1)[0]
            keys = _backend_files(backend, prefix)
            if f"{prefix}/{MODEL_FILENAME}" not in keys:
                raise FileNotFoundError(f"artifact {relpath} is not in the storage backend")
            for key in keys:
                local = tmp / key[len(prefix) + 1 :]
                local.parent.mkdir(parents=True, exist_ok=True)
                with backend.open(key, "rb") as src, open(local, "wb") as dst:
                    shutil.copyfileobj(src, dst, _CHUNK)
        try:
            os.rename(tmp, target_dir)
        except OSError:
            if not model_path.is_file():
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return model_path


def local_artifact(relpath: str) -> Path:
    """A local path of the artifact's model file, fetching it from the
    storage backend into MODEL_STORE_DIR when this machine lacks it."""
    path = artifact_path(relpath)
    if path.is_file():
        return path
    return copy_artifact(relpath, path.parent)


def _age_seconds(path: Path, now: float) -> float:
    """Seconds since ``path`` (or, for a directory, a file directly in it:
    an upload or download still being written) was last modified."""
    try:
        newest = path.lstat().st_mtime
        if path.is_dir() and not path.is_symlink():
            for child in path.iterdir():
                newest = max(newest, child.lstat().st_mtime)
        return now - newest
    except FileNotFoundError:
        return 0.0


def find_orphans(referenced: set[str], min_age_seconds: float = 0.0) -> list[Path]:
    """Store entries no version row uses, older than ``min_age_seconds``:
    staging directories and files under ``.tmp/`` (uploads in progress are
    younger), and ``<model>/<sha256>/`` artifact directories whose
    ``model.onnx`` relative path is not in ``referenced``. Paths are absolute.
    """
    root = store_root()
    now = time.time()
    orphans: list[Path] = []
    staging = root / STAGING_DIRNAME
    if staging.is_dir():
        orphans += [p for p in sorted(staging.iterdir()) if _age_seconds(p, now) >= min_age_seconds]
    for model_dir in sorted(p for p in root.iterdir() if p.is_dir() and p.name != STAGING_DIRNAME):
        for artifact_dir in sorted(model_dir.iterdir()):
            relpath = f"{model_dir.name}/{artifact_dir.name}/{MODEL_FILENAME}"
            if relpath not in referenced and _age_seconds(artifact_dir, now) >= min_age_seconds:
                orphans.append(artifact_dir)
    return orphans


def remove_path(path: Path) -> None:
    """Remove a store entry (directory or file) found by :func:`find_orphans`,
    and its model directory when that is left empty."""
    root = store_root()
    if not path.is_relative_to(root) or path == root:
        raise ValueError(f"{path} is not inside the model store {root}")
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)
    parent = path.parent
    if parent != root and parent.name != STAGING_DIRNAME and parent.is_dir() and not any(parent.iterdir()):
        parent.rmdir()


def find_remote_orphans(referenced: set[str], min_age_seconds: float = 0.0) -> list[str]:
    """Artifact prefixes (``<model>/<sha256>``) in the storage backend (S3)
    that no version row references, whose newest file is older than
    ``min_age_seconds`` (an upload publishes before its row commits). Empty
    when the backend is MODEL_STORE_DIR itself (see :func:`find_orphans`)."""
    backend = _backend()
    if _is_local_store(backend):
        return []
    used = {relpath.rsplit("/", 1)[0] for relpath in referenced}
    now = time.time()
    orphans = []
    models, _ = backend.listdir("")
    for model in sorted(models):
        artifacts, _ = backend.listdir(model)
        for sha in sorted(artifacts):
            prefix = f"{model}/{sha}"
            if prefix in used:
                continue
            keys = _backend_files(backend, prefix)
            newest = max((backend.get_modified_time(k).timestamp() for k in keys), default=0.0)
            if now - newest >= min_age_seconds:
                orphans.append(prefix)
    return orphans


def remove_remote(prefix: str) -> None:
    """Delete every file under an artifact prefix of the storage backend."""
    backend = _backend()
    for key in _backend_files(backend, prefix):
        backend.delete(key)


def missing_artifacts(referenced: set[str]) -> list[str]:
    """Referenced artifacts (relative paths of ``model.onnx``) that the
    storage backend does not have (with the filesystem default: MODEL_STORE_DIR)."""
    backend = _backend()
    if _is_local_store(backend):
        return [relpath for relpath in sorted(referenced) if not artifact_path(relpath).is_file()]
    return [relpath for relpath in sorted(referenced) if not backend.exists(relpath)]


def find_cache_orphans(cache_dir: Path, shas: set[str], min_age_seconds: float = 0.0) -> list[Path]:
    """Entries of a worker's artifact cache (``<sha256>/`` directories and
    interrupted ``.fetch-*`` downloads) that no version uses, older than
    ``min_age_seconds``."""
    cache_dir = Path(cache_dir)
    if not cache_dir.is_dir():
        return []
    now = time.time()
    return [
        path
        for path in sorted(cache_dir.iterdir())
        if path.name not in shas and _age_seconds(path, now) >= min_age_seconds
    ]


def remove_cached(path: Path) -> None:
    """Remove an entry of a worker's artifact cache found by :func:`find_cache_orphans`."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)
