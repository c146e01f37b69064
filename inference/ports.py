"""What the serving side needs from the rest of the platform.

``inference`` never imports the model store: it defines these small
interfaces, the model store (``models_store``) implements them, and the
composition root (``hosting``, when Django starts) installs the
implementations with :func:`install`. Tests install fakes the same way.

- :class:`RegistrySource`: the model registry as plain records, its change
  stamp, local change notices, and the two registry writes of Triton's
  repository extension (load/unload, a version policy from ``config``).
- :class:`ArtifactSource`: a model version's artifact as a local file.
- :class:`Authorizer`: who may call which model (inference, repository
  control, listing).
- :class:`StatisticsStore`: where statistics of every process add up.
- :class:`AuditLog`: where changes made through the serving side (trace and
  log settings) are recorded with their actor.
- ``outage_error``: which unexpected exceptions are a dependency's outage
  (the database, storage, the broker), answered as
  :class:`~inference.protocol.errors.DependencyUnavailable` by every
  transport (:func:`outage_error`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol


@dataclass(frozen=True)
class VersionRecord:
    """One stored model version. ``inputs``/``outputs``: ``{"name", "datatype",
    "shape"}`` dicts (-1 for variable dimensions). ``held``: a READY version
    the version policy does not choose (its signature would break the
    default route's callers) until a person promotes it."""

    number: int
    state: str  # UPLOADED, VALIDATING, READY, FAILED, UNAVAILABLE
    reason: str
    sha256: str
    artifact: str
    size: int  # bytes
    inputs: list = field(default_factory=list)
    outputs: list = field(default_factory=list)
    properties: dict = field(default_factory=dict)
    held: bool = False


@dataclass(frozen=True)
class ModelRecord:
    """One registered model with its versions and version labels.

    ``dynamic_batching``: Triton's ``dynamic_batching`` message as JSON
    (``preferred_batch_size``, ``max_queue_delay_microseconds``,
    ``preserve_ordering``, the priority levels and queue policies), or None
    when the model does not batch.
    ``sequence_batching``: Triton's ``sequence_batching`` message as JSON
    (protobuf's ``MessageToDict``), or None when the model keeps no sequences.
    ``team``: the owning team's name ("" for operator-owned models).
    ``traffic``: the traffic split of requests that name no version, version
    label -> weight (integers summing to 100; {}: none). ``pinned``: the
    version numbers READY ensembles run (inference/ensembles/plan.py).
    ``shadow_version``: the version that gets a copy of ``shadow_percent``
    (0..100) percent of the model's requests, its answers compared and
    discarded (inference/shadow/traffic.py); None: no shadow traffic.
    """

    name: str
    platform: str
    max_batch_size: int
    version_policy: str  # latest, all, specific
    latest_versions: int
    specific_versions: tuple[int, ...]
    loaded: bool
    instance_group: tuple = ()
    config: dict = field(default_factory=dict)
    dynamic_batching: dict | None = None
    sequence_batching: dict | None = None
    team: str = ""
    labels: dict = field(default_factory=dict)  # version label -> version number
    versions: tuple[VersionRecord, ...] = ()
    traffic: dict = field(default_factory=dict)  # version label -> weight
    payload_log_rate: float = 0.0  # share of inferences whose request and response are logged
    payload_log_max_bytes: int = 65536  # tensor bytes a logged pair may hold
    output_labels: dict = field(default_factory=dict)  # output name -> class labels (config label files)
    #: Versions that READY ensembles (of loaded models) run: they serve whatever the version policy says.
    pinned: tuple[int, ...] = ()
    shadow_version: int | None = None
    shadow_percent: float = 0.0


class RegistrySource(Protocol):
    def models(self, names: Collection[str] | None = None) -> list[ModelRecord]:
        """Every registered model (a consistent read), or those of ``names``
        (a name with no model left out)."""

    def stamp(self) -> int:
        """The registry's change counter; it moves with every committed write."""

    def changed(self, after: int, upto: int) -> frozenset[str] | None:
        """The names of the models whose records the writes that moved the
        stamp from ``after`` to ``upto`` changed (empty: none, e.g. a
        token); None when that is not known (read every model again)."""

    def subscribe(self, callback) -> None:
        """Call ``callback()`` after each registry write committed in this process."""

    def unsubscribe(self, callback) -> None: ...

    def done(self) -> None:
        """A long-lived thread finished a read (lets the source recycle connections)."""

    def set_loaded(self, name: str, loaded: bool, actor: Any = None, unload_dependents: bool = False) -> None:
        """Load or unload a model in every process (audited as ``actor``);
        ``unload_dependents``: unloading an ensemble also unloads the models
        it runs that no other loaded ensemble runs. Raises ModelNotFound;
        InUse when unloading a model that a ready ensemble runs (naming the
        ensemble)."""

    def set_config(self, name: str, config: str, actor: Any = None) -> None:
        """Replace a model's Triton configuration by ``config`` (its JSON
        form, as a repository load gives it; audited). Raises ModelNotFound,
        InvalidInput (with the reason) for a configuration the registry
        refuses."""

    def add_version(self, name: str, model_file: bytes, config: str, origin: str, actor: Any = None) -> tuple:
        """A model file and its configuration (JSON form) given in a repository
        load, as the next version of model ``name``, registered and validated
        like an upload (audited as ``actor``, ``origin`` naming the
        parameter); the same bytes as an existing version give that version.
        Returns (number, state, reason) once it is registered (validated, when
        validation runs in this process). Raises ModelNotFound, InvalidInput."""


class ArtifactSource(Protocol):
    def local_path(self, artifact: str, sha256: str) -> Path:
        """A local path of the artifact's ``model.onnx`` (fetched into a
        local cache first when the store is remote). Raises OSError."""


@dataclass(frozen=True)
class Caller:
    """Who makes a call: ``actor`` is what the registry's audit log records."""

    label: str
    actor: Any = None


@dataclass(frozen=True)
class Quota:
    """Limits of one bucket: ``rate`` requests per second with bursts of
    ``burst`` (0: the rate, at least 1), at most ``in_flight`` inferences at
    once; 0 means unlimited."""

    rate: float = 0.0
    burst: int = 0
    in_flight: int = 0

    @property
    def limited(self) -> bool:
        return self.rate > 0 or self.in_flight > 0


@dataclass(frozen=True)
class Principal:
    """Who an inference is charged to for rate limits: ``team`` (the caller's
    team, "" for none), ``token`` (a stable id of the API token, "" for
    anonymous calls), ``team_quota``: the limits operators set for the team,
    as (field, value) pairs of :class:`Quota` (the others: the defaults);
    ``user`` (a stable id of the token's user) and ``user_name`` when no team
    is charged: the call then goes to that user's own bucket, which the team
    defaults limit (a token never escapes every bucket by having no team, or
    several, to charge)."""

    team: str = ""
    token: str = ""
    team_quota: tuple = ()
    user: str = ""
    user_name: str = ""

    @property
    def anonymous(self) -> bool:
        return not self.token


ANONYMOUS = Principal()
#: The owner of the shared-memory regions of callers without a token.
ANONYMOUS_REGIONS = "anonymous"


class Authorizer(Protocol):
    def check_inference(self, token: str | None, model_name: str) -> None:
        """Raise Unauthenticated / PermissionDenied unless ``token`` may run
        inference on ``model_name`` (only asked while tokens are required)."""

    def check_control(self, token: str | None, model_name: str) -> Caller:
        """The caller if ``token`` may load/unload ``model_name`` (a token of the
        model's team, or an operator's); raises Unauthenticated / PermissionDenied."""

    def visible_models(self, token: str | None):
        """A predicate on model names the caller may see listed, or None for all."""

    def principal(self, token: str | None, model_name: str) -> Principal:
        """Who a call of ``model_name`` with ``token`` is charged to (rate
        limits); :data:`ANONYMOUS` for no, or an unknown, token. Never raises."""

    def check_operator(self, token: str | None) -> Caller:
        """The caller if ``token`` is an operator's (a superuser's); raises
        Unauthenticated / PermissionDenied (trace and log settings)."""

    def region_owner(self, token: str) -> str:
        """Who owns the shared-memory regions of ``token``'s caller:
        ``team:<name>`` for a token of one team, ``user:<id>`` for any other
        token (several teams, an operator's); "" for an unknown, revoked or
        expired token. Never raises; answers from memory."""

    def check_regions(self, token: str) -> tuple[str, Caller]:
        """(:meth:`region_owner`, the caller, audited) for registering,
        listing or unregistering shared-memory regions; raises
        Unauthenticated for an unknown, revoked or expired token."""

    def answers_now(self, token: str, model_name: str) -> bool:
        """Whether :meth:`check_inference`, :meth:`principal` and
        :meth:`region_owner` of ``token`` for ``model_name`` answer from
        memory, with no query to wait for (an event loop then admits the
        call inline rather than in a thread)."""


class StatisticsStore(Protocol):
    def add(self, machine: str, versions: dict, batches: dict, last: dict) -> None:
        """Add a machine's per-version and per-batch-size counter deltas (see
        :mod:`inference.observability.statistics`); raises on failure (deltas are kept)."""

    def read(self, keys: list[tuple[str, int]], exclude_machine: str = "") -> tuple[dict, dict, dict]:
        """Totals of every machine but ``exclude_machine`` for (model, version) keys: (versions, batches, last)."""


class AuditLog(Protocol):
    def record(self, actor: Any, action: str, model_name: str = "", **detail) -> None:
        """Record a change made through the serving side (e.g. trace settings) with its actor."""


@dataclass
class Container:
    """The implementations the composition root installed (the dependency
    container; "providers" means ONNX Runtime's execution providers only)."""

    registry_source: RegistrySource | None = None
    artifact_source: ArtifactSource | None = None
    authorizer: Authorizer | None = None
    statistics_store: StatisticsStore | None = None
    dataplane_factory: Any = None  # () -> DataPlane
    extensions_factory: Any = None  # () -> Extensions (inference/extensions), over the data plane's collaborators
    audit_log: AuditLog | None = None
    outage_error: Any = None  # (exception) -> InferenceError | None: a dependency's outage, as the caller's error


container = Container()


def outage_error(exc: BaseException):
    """The protocol error to answer for an unexpected ``exc`` raised from a
    dependency's outage (the installed classifier's
    :class:`~inference.protocol.errors.DependencyUnavailable`: REST 503 with
    ``Retry-After``, gRPC UNAVAILABLE), None for anything else (a bug:
    500 / INTERNAL, logged)."""
    classify = container.outage_error
    return None if classify is None else classify(exc)


def install(**implementations) -> None:
    """Install implementations (keyword names: the fields of :class:`Container`)."""
    for name, value in implementations.items():
        if not hasattr(container, name):
            raise TypeError(f"unknown port {name!r}")
        setattr(container, name, value)


def built_once(factory: str, what: str) -> Callable[[], Any]:
    """A function returning this process's one object that the installed
    ``container.<factory>`` builds, made on first use (so that each server
    process, after a fork, builds its own and starts its own threads).
    Raises RuntimeError when the composition root installed no factory."""
    made: list = []
    lock = threading.Lock()

    def get():
        if not made:
            with lock:
                if not made:
                    build = getattr(container, factory)
                    if build is None:
                        raise RuntimeError(f"no {what} factory is installed (the composition root did not run)")
                    made.append(build())
        return made[0]

    return get
