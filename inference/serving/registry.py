"""The serving registry: an in-memory snapshot of the model registry.

Requests resolve ``(model, version)`` against the snapshot without touching
the database. The snapshot is rebuilt when the registry's change stamp moves:
at once after a write committed in this process (``registry_changed``),
within ``REGISTRY_POLL_SECONDS`` for writes made by other processes (a daemon
thread reads the one-row stamp), and at once when a request names a model or
version the snapshot does not know or does not serve (one stamp read, see
:meth:`ModelRegistry.catch_up`): a version is servable in every process as
soon as the write that made it READY has committed. Loaded ONNX Runtime
sessions are kept across rebuilds as long as their version still serves; the
others are dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from inference.ensembles.plan import PLATFORM as ENSEMBLE
from inference.observability.outage import REFUSALS, DependencyWatch
from inference.ports import RegistrySource
from inference.protocol import triton_texts
from inference.protocol.errors import ModelNotFound
from inference.protocol.types import ModelMetadata
from inference.serving.snapshot import ModelEntry, VersionEntry, build_snapshot

logger = logging.getLogger(__name__)


class ModelRegistry:
    """Resolves model names and versions from an in-memory snapshot.

    ``source`` gives the registry's records, its change stamp and local
    change notices (:class:`~inference.ports.RegistrySource`). ``beacon`` (a
    :class:`~inference.serving.changes.ChangeBeacon`) is read before every lookup:
    when another process of the machine changed the registry, the snapshot
    is rebuilt before the lookup answers. Call :meth:`start` to follow changes.
    """

    def __init__(self, source: RegistrySource, poll_seconds: float = 1.0, beacon=None, miss_seconds: float = 0.05):
        self.source = source
        self.miss_seconds = miss_seconds
        self._poll_seconds = poll_seconds
        self._lock = threading.Lock()
        self._catch_up_lock = threading.Lock()
        self._checked_at = float("-inf")  # when the last catch-up's stamp read began
        self._listeners: list = []
        self._stamp = -1
        self._models: dict[str, ModelEntry] = {}
        #: The ensembles and the models they run, as of the last whole read (a patch never changes them).
        self._related: frozenset[str] = frozenset()
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._beacon = beacon
        self._beacon_seen = beacon.read() if beacon is not None else 0
        self._follow_lock = threading.Lock()
        self._follower: ThreadPoolExecutor | None = None
        self.loaded = False
        #: One line when the registry's database goes away, one when it is back (not one per poll).
        self.database = DependencyWatch("the model registry's database", logger)

    # -- change tracking -------------------------------------------------
    def add_listener(self, callback, teams_only: bool = False) -> None:
        """``callback(snapshot)`` runs after every rebuild (e.g. to drop stale
        sessions; an exception it raises is logged, and the next listener
        runs); with ``teams_only``, only after one that may have changed
        who may call what: a whole read, writes that changed no model's
        record (API tokens), a model created, deleted or given to another
        team (the token scopes' listener)."""
        self._listeners.append((callback, teams_only))

    def refresh(self, force: bool = False) -> bool:
        """Rebuild the snapshot if the stamp moved (or ``force``); True if rebuilt.

        Only the models the writes since the last rebuild changed are read
        again (:meth:`_patched`) when the source knows them; else, and for
        ``force``, every model."""
        with self._lock:
            stamp = self.source.stamp()
            if stamp == self._stamp and not force and self.loaded:
                return False
            patch = self._patched(stamp) if self.loaded and not force and stamp > self._stamp else None
            if patch is None:
                with _collector_paused():  # 10,000 models are ~10^5 new objects: no collection passes over them midway
                    models, teams = build_snapshot(self.source.models()), True
                self._related = _ensemble_related(models)
            else:
                models, teams = patch
            self._models = models
            self._stamp = stamp
            self.loaded = True
        for callback, teams_only in self._listeners:
            if teams or not teams_only:
                try:
                    callback(models)
                except Exception:  # its own bug, not the database's: logged as such; the others still hear
                    logger.exception("a registry listener (%s) failed on the new snapshot", _name(callback))
        return True

    def _patched(self, stamp: int) -> tuple[dict[str, ModelEntry], bool] | None:
        """The snapshot at ``stamp`` from the current one with only the
        models changed since read again (a deleted one dropped), and whether
        who may call what may have changed (see :meth:`add_listener`); None
        when the source does not know which changed, or when one of them is
        an ensemble, a step of one or run by one (an ensemble's serving
        state follows its steps': those read whole)."""
        names = self.source.changed(self._stamp, stamp)
        if names is None:
            return None
        current = self._models
        if not names:
            return current, True
        if names & self._related:
            return None
        records = self.source.models(names)
        if any(record.platform == ENSEMBLE or record.pinned for record in records):
            return None
        fresh = build_snapshot(records)
        models = dict(current)
        for name in names - fresh.keys():
            models.pop(name, None)  # deleted
        models.update(fresh)  # a model that was there keeps its place
        if any(name not in current for name in fresh):
            models = dict(sorted(models.items()))  # in name order, as a whole read
        teams = any(
            name not in current or name not in fresh or current[name].team != fresh[name].team for name in names
        )  # fmt: skip
        return models, teams

    def catch_up(self, seen: dict | None = None) -> bool:
        """Make the snapshot at least as new as the registry's change stamp now;
        True if the snapshot is another than ``seen`` (the one a lookup
        missed in; default: the current one), i.e. worth looking up again.

        Lookups call it on a miss (unknown model, version or label; a version
        that does not serve) so that a model uploaded or imported on another
        machine is callable at once, not at the next poll (changes made on
        this machine are seen through the beacon before their call answered).
        Costs one stamp read (a one-row SELECT, ~15 us on SQLite), at most
        one per ``miss_seconds`` per process: misses in between, and misses
        that wait while a read is under way, answer from its result, so that
        a flood of unknown names is not a flood of queries. On an event
        loop's thread (gRPC), where Django forbids queries, the read runs in
        a helper thread. A failed read leaves the snapshot as is.
        """
        seen = self._models if seen is None else seen
        if not self.loaded:
            return False
        arrived = time.monotonic()
        with self._catch_up_lock:
            if self._checked_at + self.miss_seconds <= arrived:  # no read began recently
                self._checked_at = time.monotonic()
                self._off_loop(self._refresh_quietly)
        return self._models is not seen

    def _refresh_quietly(self) -> None:
        try:
            self.refresh()
        except Exception as exc:  # the database is away: answer from the snapshot; the poller retries
            self.database.failed(exc, self._outage_note())
        else:
            self.database.ok()
        finally:
            self._release_source()

    def _release_source(self) -> None:
        """Let the source drop this thread's connections; a failure there is
        logged, never raised, so the poller and the caller's read live on."""
        try:
            self.source.done()
        except Exception:
            logger.warning("registry source: releasing connections failed", exc_info=True)

    def _outage_note(self) -> str:
        every = f"; retrying every {self._poll_seconds:g} s" if self._poll_seconds > 0 else ""
        if not self.loaded:
            return f"no model is served until it answers{every}"
        return f"serving the {len(self._models)} model(s) of the last snapshot{every}"

    def _off_loop(self, call) -> None:
        """``call()`` here, or in a helper thread (waiting for it) on an event
        loop's thread, where Django forbids queries."""
        if not _on_event_loop():
            call()
            return
        if self._follower is None:
            self._follower = ThreadPoolExecutor(1, thread_name_prefix="registry-follow")
        self._follower.submit(call).result()

    def _current(self) -> dict[str, ModelEntry]:
        """The snapshot, rebuilt first if the machine's change beacon moved."""
        beacon = self._beacon
        if beacon is not None and beacon.read() != self._beacon_seen and self.loaded:
            self._off_loop(self._follow_beacon)
        return self._models

    def _follow_beacon(self) -> None:
        with self._follow_lock:
            value = self._beacon.read()
            if value == self._beacon_seen:
                return  # another thread rebuilt meanwhile
            self._refresh_quietly()
            self._beacon_seen = value

    def start(self) -> None:
        """Load now and follow the change stamp from a daemon thread."""
        self.source.subscribe(self._on_local_change)
        try:
            self.refresh(force=True)
        except Exception as exc:
            if self._poll_seconds <= 0:
                raise
            self.database.failed(exc, self._outage_note())
        if self._poll_seconds > 0 and self._thread is None:
            self._thread = threading.Thread(target=self._poll, name="registry-poll", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self.source.unsubscribe(self._on_local_change)
        self._stop.set()

    def _on_local_change(self) -> None:
        try:
            self.refresh()
        except Exception as exc:  # the poller will retry
            self.database.failed(exc, self._outage_note())

    def _poll(self) -> None:
        while not self._stop.wait(self._poll_seconds):
            self._refresh_quietly()
            REFUSALS.tick()

    # -- repository control ---------------------------------------------
    def set_loaded(self, name: str, loaded: bool, actor=None, unload_dependents: bool = False) -> None:
        """Load or unload ``name`` in every process (a registry write, audited
        as ``actor``; ``unload_dependents``: see :meth:`RegistrySource.set_loaded
        <inference.ports.RegistrySource.set_loaded>`); raises ModelNotFound,
        InUse. Every process of the machine follows before this returns (the
        change beacon)."""
        self.model(name)
        self.source.set_loaded(name, loaded, actor, unload_dependents)

    def set_config(self, name: str, config: str, actor=None) -> None:
        """Replace a model's Triton configuration (JSON text) in every
        process; raises ModelNotFound, InvalidInput (a configuration the
        registry refuses)."""
        self.model(name)
        self.source.set_config(name, config, actor)

    def add_version(self, name: str, model_file: bytes, config: str, origin: str, actor=None) -> tuple:
        """A model file and configuration as the model's next version
        (:meth:`inference.ports.RegistrySource.add_version`): (number, state,
        reason); raises ModelNotFound, InvalidInput."""
        self.model(name)
        return self.source.add_version(name, model_file, config, origin, actor)

    # -- lookups ---------------------------------------------------------
    @property
    def models(self) -> dict[str, ModelEntry]:
        return self._current()

    def model(self, name: str) -> ModelEntry:
        """The model's entry; raises ModelNotFound (after :meth:`catch_up`)."""
        seen = self._current()
        entry = seen.get(name)
        if entry is None:
            if self.catch_up(seen):
                return self.model(name)
            raise triton_texts.unknown_model(name)
        return entry

    def version(self, name: str, version: str | None) -> VersionEntry:
        """The entry for ``version`` of ``name`` (the default version when None),
        whatever its state. Raises ModelNotFound, or ModelNotReady when no
        version serves and none was named."""
        seen = self._current()
        model = self.model(name)
        if version is None or version == "":
            entry = model.default
            if entry is None:
                if self.catch_up(seen):
                    return self.version(name, version)
                raise triton_texts.no_available_versions(name, _why(model))
            return entry
        number = parse_version(version)
        entry = model.versions.get(number)
        if entry is None:
            if self.catch_up(seen):
                return self.version(name, version)
            raise triton_texts.unknown_version(name, number, list(model.versions))
        return entry

    def label(self, name: str, label: str) -> str:
        """The version number (as a string) that ``label`` of model ``name``
        points at. Raises ModelNotFound for an unknown model or label."""
        seen = self._current()
        model = self.model(name)
        number = model.labels.get(label)
        if number is None:
            if self.catch_up(seen):
                return self.label(name, label)
            known = ", ".join(sorted(model.labels)) or "none"
            raise ModelNotFound(f"unknown version label '{label}' of model '{name}' (labels: {known})")
        return str(number)

    def route(self, name: str, version: str | None, draw: float | None = None) -> VersionEntry:
        """The version that runs an inference request: the named one (as
        :meth:`resolve`), or, when none is named, the one the model's traffic
        split draws (``draw``: see :meth:`ModelEntry.route`; the default
        version without a split). Raises like :meth:`resolve`."""
        if version:
            return self.resolve(name, version)
        seen = self._current()
        model = seen.get(name)
        entry = model.route(draw) if model is not None else None
        if entry is None or not entry.serving:
            return self.resolve(name, version)  # the slow path: catch-up, errors
        return entry

    def resolve(self, name: str, version: str | None) -> VersionEntry:
        """Like :meth:`version`, but the version must serve; raises ModelNotReady
        (with the version's state and reason) when it does not."""
        seen = self._current()
        entry = self.version(name, version)
        if not entry.serving:
            if self.catch_up(seen):
                return self.resolve(name, version)
            raise triton_texts.version_not_ready(name, entry.number, entry.state, entry.reason)
        return entry

    def metadata(self, name: str, version: str | None) -> ModelMetadata:
        model = self.model(name)
        entry = self.version(name, version)
        return ModelMetadata(
            name=name,
            versions=tuple(str(n) for n in model.served),
            platform=model.platform,
            inputs=entry.inputs,
            outputs=entry.outputs,
        )


def _name(callback) -> str:
    return getattr(callback, "__qualname__", None) or repr(callback)


def _ensemble_related(snapshot: dict[str, ModelEntry]) -> frozenset[str]:
    """The names of the ensembles in ``snapshot`` and of every model their
    versions' plans run (a patch that touches one is refused, so this holds
    from one whole read to the next)."""
    related = set()
    for entry in snapshot.values():
        if entry.platform == ENSEMBLE:
            related.add(entry.name)
            for version in entry.versions.values():
                if version.ensemble is not None:
                    related.update(model for model, _number in version.ensemble.pins())
    return frozenset(related)


@contextlib.contextmanager
def _collector_paused():
    """Python's cyclic garbage collector off while the block runs (the
    snapshot's objects hold no cycles; refcounting frees the old snapshot)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _on_event_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def _why(model: ModelEntry) -> str:
    if not model.versions:
        return " (it has no versions)"
    newest = model.versions[max(model.versions)]
    detail = f": {newest.reason}" if newest.reason else ""
    return f" (newest: version {newest.number} {newest.state}{detail})"


def parse_version(version: str) -> int:
    """A version string as a whole number (0 names no version: looking it up
    fails as for any unknown number); raises ModelNotFound otherwise, in
    Triton's words (no version can have such a name)."""
    if not version.isascii() or not version.isdigit() or len(version) > 18:  # Triton: std::stol's range
        raise triton_texts.bad_version_string(version)
    return int(version)
