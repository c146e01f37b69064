"""The model store's implementations of the serving side's ports
(:mod:`inference.ports`): the registry as records, artifacts as local
files. The composition root (``hosting``) installs them."""

from __future__ import annotations

import logging
import os
import shutil
import time
from pathlib import Path

from django.conf import settings
from django.db import close_old_connections

from inference.ports import ModelRecord
from inference.protocol.errors import InUse, InvalidInput, ModelNotFound
from models_store import audit, outages, storage
from models_store.config.triton import ConfigError
from models_store.errors import Conflict, NotFound, RegistryError, UploadRefused
from models_store.intake import services as intake
from models_store.registry import selectors
from models_store.registry.services import models as model_services
from models_store.stamp import changed_models, registry_changed, stamp_get

logger = logging.getLogger(__name__)


class StoreRegistrySource:
    """:class:`inference.ports.RegistrySource` over the registry database."""

    def __init__(self):
        self._receivers: dict = {}

    def models(self, names=None) -> list[ModelRecord]:
        return selectors.serving_records(names)

    def stamp(self) -> int:
        return stamp_get()

    def changed(self, after: int, upto: int) -> frozenset[str] | None:
        return changed_models(after, upto)

    def subscribe(self, callback) -> None:
        def receiver(**_kwargs):
            callback()

        self._receivers[callback] = receiver
        registry_changed.connect(receiver, weak=False)

    def unsubscribe(self, callback) -> None:
        receiver = self._receivers.pop(callback, None)
        if receiver is not None:
            registry_changed.disconnect(receiver)

    def done(self) -> None:
        close_old_connections()

    @staticmethod
    def _model(name: str):
        model = selectors.model_get(name)
        if model is None:
            raise ModelNotFound(f"unknown model '{name}'")
        return model

    def set_loaded(self, name: str, loaded: bool, actor=None, unload_dependents: bool = False) -> None:
        with outages.as_unavailable():
            try:
                model_services.model_set_loaded(
                    model=self._model(name), loaded=loaded, actor=actor, unload_dependents=unload_dependents
                )
            except Conflict as exc:  # a READY ensemble runs one of its versions
                raise InUse(str(exc)) from None

    def set_config(self, name: str, config: str, actor=None) -> None:
        with outages.as_unavailable():
            try:
                model_services.model_load_config(model=self._model(name), text=config, actor=actor)
            except ConfigError as exc:
                raise InvalidInput(f"invalid config override: {exc}") from None

    def add_version(self, name: str, model_file: bytes, config: str, origin: str, actor=None) -> tuple[int, str, str]:
        with outages.as_unavailable():
            try:
                version = intake.version_from_load(
                    model_name=name, model_file=model_file, config_text=config, origin=origin, actor=actor
                )
            except NotFound as exc:
                raise ModelNotFound(str(exc)) from None
            except (RegistryError, UploadRefused) as exc:
                raise InvalidInput(str(exc)) from None
            return _validated(version)


#: Validation states a load with a file waits out (a worker, or this process in the background, validates).
_VALIDATING = (selectors.State.UPLOADED, selectors.State.VALIDATING)


def _validated(version, poll_seconds: float = 0.05) -> tuple[int, str, str]:
    """(number, state, reason) of ``version`` once its validation ended, as
    Triton's load returns once the model is loaded: a worker (worker mode)
    or a background validation (a file above VALIDATE_IN_REQUEST_MAX_BYTES)
    may still hold it; waited for at most MODEL_LOAD_WAIT_SECONDS, then
    the state it is in (the load answers; the version serves when READY)."""
    deadline = time.monotonic() + settings.MODEL_LOAD_WAIT_SECONDS
    version.refresh_from_db()
    while version.state in _VALIDATING and time.monotonic() < deadline:
        time.sleep(poll_seconds)
        version.refresh_from_db()
    return version.number, version.state, version.reason


class StoreArtifacts:
    """:class:`inference.ports.ArtifactSource` over the artifact store: the
    store's own file (fetched from the storage backend when this machine
    lacks it), or, with ``cache_dir`` (workers), a copy under
    ``cache_dir/<sha256>/`` made once per machine."""

    def __init__(self, cache_dir: Path | None = None):
        self.cache_dir = cache_dir

    def local_path(self, artifact: str, sha256: str) -> Path:
        if self.cache_dir is None:
            return storage.local_artifact(artifact)
        return storage.copy_artifact(artifact, Path(self.cache_dir) / sha256)


class CacheJanitor:
    """A registry listener that removes this machine's local copies of
    artifacts whose versions left the registry (deleted on any machine), so
    that no shared disk is needed to delete everywhere.

    ``root`` holds one directory per artifact: ``<sha256>/`` (a worker's
    WORKER_CACHE_DIR, ``layout="sha256"``) or ``<model>/<sha256>/`` (the
    model store's local copies when artifacts live in S3, ``layout="store"``).
    On each snapshot it removes the directories of artifacts that were in the
    previous snapshot and are in none of the new one's versions (any state).
    On the first snapshot it removes directories no version uses that are
    older than ``min_age`` seconds (left while the process was down), and
    interrupted fetches (``.fetch-*``) as old: younger ones may be another
    process's work in progress.
    """

    def __init__(self, root: Path, layout: str = "sha256", min_age: float = 600.0):
        if layout not in ("sha256", "store"):
            raise ValueError(f"layout must be sha256 or store, not {layout!r}")
        self.root = Path(root)
        self.layout = layout
        self.min_age = min_age
        self._known: set[str] | None = None  # directories under root, as relative paths

    def on_snapshot(self, snapshot: dict) -> None:
        """Registry listener (``snapshot``: model name -> entry with ``versions``).
        Strings, not Paths, for every version: ~1 ms at 10,000 versions."""
        versions = (v for model in snapshot.values() for v in model.versions.values() if v.artifact)
        if self.layout == "sha256":
            keep = {v.sha256 for v in versions}
        else:
            keep = {os.path.dirname(v.artifact) for v in versions}
        try:
            if self._known is None:
                self._sweep(keep)
            else:
                for directory in sorted(self._known - keep):
                    self._remove(self.root / directory)
        except OSError:
            logger.exception("cleaning the artifact cache %s failed", self.root)
        self._known = keep

    def _candidates(self):
        """(relative path, path) of each artifact directory under root."""
        if not self.root.is_dir():
            return
        if self.layout == "sha256":
            for path in self.root.iterdir():
                yield path.name, path
            return
        for model_dir in self.root.iterdir():
            if model_dir.is_dir() and model_dir.name != storage.STAGING_DIRNAME:
                for path in model_dir.iterdir():
                    yield f"{model_dir.name}/{path.name}", path

    def _sweep(self, keep: set[str]) -> None:
        now = time.time()
        for relative, path in list(self._candidates()):
            if relative in keep or not path.is_dir():
                continue
            try:
                age = now - path.lstat().st_mtime
            except FileNotFoundError:
                continue
            if age >= self.min_age:
                self._remove(path)

    def _remove(self, directory: Path) -> None:
        if not directory.exists():
            return
        shutil.rmtree(directory, ignore_errors=True)
        logger.info("removed the local copy %s (its version left the registry)", directory)
        parent = directory.parent
        if self.layout == "store" and parent != self.root and parent.is_dir() and not any(parent.iterdir()):
            parent.rmdir()


class StoreAuditLog:
    """:class:`inference.ports.AuditLog` over the registry's audit log."""

    def record(self, actor, action: str, model_name: str = "", **detail) -> None:
        model = selectors.model_get(model_name) if model_name else None
        audit.record(actor, action, model, **detail)
