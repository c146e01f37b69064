"""The serving registry's snapshot: every model and model version as the
serving side sees them (:class:`ModelEntry`, :class:`VersionEntry`: the
data plane, the transport adapters, the extensions and the workers read the
same entries), built from the model store's records (:func:`build_snapshot`).

A snapshot is immutable once built; :class:`inference.serving.registry.ModelRegistry`
swaps whole snapshots. Which versions serve is decided by
:mod:`inference.serving.state`.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from inference.ensembles import plan as ensembles
from inference.ports import ModelRecord
from inference.protocol.datatypes import BY_NAME, Datatype
from inference.protocol.types import MetadataTensor
from inference.runtime.execution import BatchingPolicy, RunTarget
from inference.runtime.onnx import asks_for_extensions, config_flag
from inference.runtime.queue_policy import PriorityLevels, QueuePolicyError
from inference.runtime.sequences.policy import SequenceConfigError, SequencePolicy
from inference.runtime.warmup import samples_for
from inference.serving.instance_groups import total_instances
from inference.serving.state import ServingState, serving_states


@dataclass(frozen=True, eq=False, slots=True)
class InputSpec:
    name: str
    datatype: Datatype
    shape: tuple[int, ...]


@dataclass(eq=False, slots=True)
class VersionEntry:
    """One model version as the serving side sees it: its signature and
    state (what the adapters read: :meth:`inference.dataplane.DataPlane.route`
    returns it, and :meth:`~inference.dataplane.DataPlane.infer` takes it
    back, so that a request resolves its version once) and how it runs.

    ``serving`` is true when the version is READY and the version policy
    serves it; ``reason`` explains why it does not serve otherwise. An
    ensemble's version has no ``target`` (no model file) but its
    ``ensemble`` plan (inference/ensembles/plan.py); it serves only while every
    version it pins serves. Entries do not change once their snapshot is
    published. ``input_specs``, ``output_types`` and ``output_names`` are
    derived from ``inputs`` and ``outputs`` when not given (a snapshot gives
    them, shared by the versions with one signature).
    """

    model_name: str
    number: int
    state: str
    reason: str
    serving: bool
    sha256: str
    artifact: str
    max_batch_size: int
    size: int
    inputs: tuple[MetadataTensor, ...]
    outputs: tuple[MetadataTensor, ...]
    properties: dict
    target: RunTarget | None = None  # how the model runner runs it
    instance_group: tuple = ()  # the model's, for placement on workers
    input_specs: dict[str, InputSpec] = field(default_factory=dict)
    output_types: dict[str, str] = field(default_factory=dict)
    output_names: list[str] = field(default_factory=list)
    payload_log: tuple[float, int] = (0.0, 0)  # the model's (share logged, tensor bytes cap)
    output_labels: dict = field(default_factory=dict)  # the model's: output name -> class labels
    optional_inputs: frozenset = frozenset()  # inputs a request may leave out (config.pbtxt ``optional``)
    response_cache: bool = False  # config.pbtxt ``response_cache { enable: true }``
    ensemble: ensembles.Plan | None = None  # an ensemble's version: the graph it runs
    #: (share of requests copied, 0..1; the shadow version) while the model has shadow traffic, on every
    #: version but the shadow itself: the data plane offers their requests' copies (inference/shadow/traffic.py).
    shadow: tuple[float, VersionEntry] | None = None
    version: str = field(default="", init=False)  # ``number`` as the protocols write it
    class_labels: tuple[str, ...] = field(default=(), init=False)  # for classification outputs (may be empty)

    def __post_init__(self) -> None:
        if not self.input_specs and self.inputs:
            self.input_specs = {t.name: InputSpec(t.name, BY_NAME[t.datatype], t.shape) for t in self.inputs}
        if not self.output_names and self.outputs:
            self.output_types = {t.name: t.datatype for t in self.outputs}
            self.output_names = [t.name for t in self.outputs]
        self.version = str(self.number)
        self.class_labels = tuple(self.properties.get("labels") or ())

    @property
    def key(self) -> tuple[str, int, str]:
        return (self.model_name, self.number, self.sha256)


@dataclass(frozen=True, eq=False, slots=True)
class ModelEntry:
    name: str
    platform: str
    versions: dict[int, VersionEntry]
    served: tuple[int, ...]  # highest first
    max_batch_size: int
    labels: dict[str, int] = field(default_factory=dict)  # version label -> version number
    loaded: bool = True
    policy: tuple = ("latest", 1, ())  # (kind, latest N, specific versions)
    instance_group: tuple = ()
    config: dict = field(default_factory=dict)  # the imported config.pbtxt, as JSON
    batching: BatchingPolicy | None = None
    sequence: SequencePolicy | None = None  # sequence batching
    team: str = ""
    #: The traffic split: (cumulative weight in [0, 1], version) pairs, the last at 1.0; () without one.
    split: tuple[tuple[float, VersionEntry], ...] = ()
    traffic: dict = field(default_factory=dict)  # as stored: version label -> weight
    state: ServingState | None = None  # what serves (inference/serving/state.py)
    shadow: tuple[float, VersionEntry] | None = None  # (share copied, the shadow version); None: no shadow traffic

    @property
    def default(self) -> VersionEntry | None:
        """The version a request that names none sees in metadata, configuration
        and readiness (:attr:`ServingState.default`): with a traffic split its
        heaviest route, else the highest version served."""
        number = self.state.default if self.state is not None else None
        return self.versions[number] if number is not None else None

    def route(self, draw: float | None = None) -> VersionEntry | None:
        """The version that answers a request naming none: drawn by the traffic
        split's weights (one random number, no lock; ``draw`` in [0, 1)
        instead when given: the same for every request of a sequence), else
        the default."""
        split = self.split
        if not split:
            return self.default
        if draw is None:
            draw = random.random()
        for cumulative, entry in split:
            if draw < cumulative:
                return entry
        return split[-1][1]


def _tensors(items: list) -> tuple[MetadataTensor, ...]:
    return tuple(MetadataTensor(t["name"], t["datatype"], tuple(t["shape"])) for t in items)


@dataclass(frozen=True, slots=True)
class _Signature:
    """A version's signature as its entry holds it: shared by the entries of
    one snapshot whose records hold the same parsed signature (the registry
    source parses each distinct text once), so that 10,000 versions of one
    signature cost one."""

    inputs: tuple[MetadataTensor, ...]
    outputs: tuple[MetadataTensor, ...]
    input_specs: dict
    output_types: dict
    output_names: list
    all_inputs: tuple[MetadataTensor, ...]  # before the server's own inputs are hidden (warm-up samples)


class _Signatures:
    """The signatures of one snapshot's build, by the identity of the
    records' parsed lists (alive for the whole build)."""

    def __init__(self):
        self._known: dict[tuple, _Signature] = {}

    def of(self, inputs: list, outputs: list, hidden_in: frozenset, hidden_out: frozenset) -> _Signature:
        key = (id(inputs), id(outputs), hidden_in, hidden_out)
        found = self._known.get(key)
        if found is None:
            everything = _tensors(inputs)
            shown_in = _visible(everything, hidden_in)
            shown_out = _visible(_tensors(outputs), hidden_out)
            found = self._known[key] = _Signature(
                shown_in, shown_out,
                {t.name: InputSpec(t.name, BY_NAME[t.datatype], t.shape) for t in shown_in},
                {t.name: t.datatype for t in shown_out}, [t.name for t in shown_out], everything,
            )  # fmt: skip
        return found


def batching_policy(record: ModelRecord) -> BatchingPolicy | None:
    """The model's dynamic batching, or None: no ``dynamic_batching``, or
    ``max_batch_size`` 0 without priority levels or a queue policy (with
    them, its requests queue by level and run one at a time, as in Triton)."""
    config = record.dynamic_batching
    if config is None:
        return None
    preserve = bool(config.get("preserve_ordering", False))
    try:
        levels = PriorityLevels.from_config(config, preserve)
    except QueuePolicyError:  # checked when the config was stored: not reached
        levels = PriorityLevels()
    if record.max_batch_size <= 0 and not levels.configured:
        return None
    return BatchingPolicy(
        max(0, record.max_batch_size),
        tuple(int(n) for n in config.get("preferred_batch_size", ())),
        int(config.get("max_queue_delay_microseconds", 0)),
        preserve,
        levels,
    )


def sequence_policy(record: ModelRecord) -> SequencePolicy | None:
    """The model's sequence batching (None without, or when its configuration
    is refused: then nothing serves, see :func:`inference.serving.state.sequence_refusal`)."""
    if record.sequence_batching is None:
        return None
    try:
        return SequencePolicy.from_config(record.sequence_batching, record.max_batch_size, record.name)
    except SequenceConfigError:
        return None


def _visible(tensors: tuple[MetadataTensor, ...], hidden: frozenset[str]) -> tuple[MetadataTensor, ...]:
    return tuple(t for t in tensors if t.name not in hidden) if hidden else tensors


@dataclass(frozen=True, slots=True)
class _ModelRunning:
    """How a model's versions run, from its configuration (shared by the
    models without one)."""

    batching: BatchingPolicy | None = None
    sequence: SequencePolicy | None = None
    hidden_in: frozenset = frozenset()
    hidden_out: frozenset = frozenset()
    optional: frozenset = frozenset()
    cached: bool = False
    extensions: bool = False
    warmups: tuple = ()
    always_loaded: bool = False


#: The model config parameter (``parameters { key: "always_loaded" value: { string_value: "true" } }``)
#: that keeps the model's serving versions loaded in every process from its start (inference/runtime/runner.py).
ALWAYS_LOADED_PARAMETER = "always_loaded"

_PLAIN = _ModelRunning()


def _running(model: ModelRecord) -> _ModelRunning:
    config = model.config
    if not config and model.dynamic_batching is None and model.sequence_batching is None:
        return _PLAIN
    config = config or {}
    batching = batching_policy(model)
    sequence = sequence_policy(model)
    # Control and state inputs are the server's, state outputs too unless the config lists them (Triton).
    listed = {t.get("name") for t in config.get("output") or ()}
    return _ModelRunning(
        batching,
        sequence,
        sequence.supplied_inputs if sequence else frozenset(),
        sequence.state_outputs - listed if sequence else frozenset(),
        frozenset(t["name"] for t in config.get("input", ()) if t.get("optional")),
        bool((config.get("response_cache") or {}).get("enable")),
        asks_for_extensions(config.get("parameters") or {}),
        tuple(config.get("model_warmup") or ()),
        config_flag(config.get("parameters") or {}, ALWAYS_LOADED_PARAMETER),
    )


def build_snapshot(records: list[ModelRecord]) -> dict[str, ModelEntry]:
    """Snapshot entries from registry records (entries of versions with one
    parsed signature share it: :class:`_Signature`)."""
    snapshot: dict[str, ModelEntry] = {}
    states = serving_states(records)  # an ensemble's versions follow their steps'
    signatures = _Signatures()
    for model in records:
        state = states[model.name]
        running = _running(model)
        batching, sequence = running.batching, running.sequence
        instances = total_instances(model.instance_group) if model.instance_group else 1
        instance_group = tuple(model.instance_group)
        payload_log = (model.payload_log_rate, model.payload_log_max_bytes)
        versions = {}
        ensemble = model.platform == ensembles.PLATFORM
        for row in model.versions:
            signature = signatures.of(row.inputs, row.outputs, running.hidden_in, running.hidden_out)
            warmup = (
                samples_for(running.warmups, batching, signature.all_inputs, model.max_batch_size)
                if running.warmups or batching is not None
                else ()
            )
            versions[row.number] = VersionEntry(
                model_name=model.name,
                number=row.number,
                state=row.state,
                reason=state.reason(row.number, row.state, row.reason),
                serving=state.serves(row.number),
                sha256=row.sha256,
                artifact=row.artifact,
                max_batch_size=model.max_batch_size,
                size=row.size,
                inputs=signature.inputs,
                outputs=signature.outputs,
                properties=row.properties,
                target=None
                if ensemble
                else RunTarget(
                    model.name,
                    row.number,
                    row.sha256,
                    row.artifact,
                    row.size,
                    instances,
                    batching,
                    sequence,
                    running.extensions,
                    warmup,
                    running.always_loaded,
                ),
                ensemble=ensembles.plan_of(row.properties) if ensemble else None,
                instance_group=instance_group,
                input_specs=signature.input_specs,
                output_types=signature.output_types,
                output_names=signature.output_names,
                payload_log=payload_log,
                output_labels=model.output_labels,
                optional_inputs=running.optional,
                response_cache=running.cached,
            )
        shadow = _shadow(model, state, versions) if not ensemble else None
        total = sum(weight for _label, _number, weight in state.routes)
        split, cumulative = [], 0
        for _label, number, weight in state.routes:
            cumulative += weight
            split.append((cumulative / total, versions[number]))
        if split:
            split[-1] = (1.0, split[-1][1])
        snapshot[model.name] = ModelEntry(
            model.name,
            model.platform,
            versions,
            state.served,
            model.max_batch_size,
            model.labels,
            loaded=model.loaded,
            policy=(model.version_policy, model.latest_versions, tuple(model.specific_versions)),
            instance_group=instance_group,
            config=model.config,
            batching=batching,
            sequence=sequence,
            team=model.team,
            split=tuple(split),
            traffic=model.traffic,
            state=state,
            shadow=shadow,
        )
    return snapshot


def _shadow(model: ModelRecord, state: ServingState, versions: dict) -> tuple[float, VersionEntry] | None:
    """The model's shadow traffic (share of requests copied, the shadow version), set on each
    other version's entry; None without a READY shadow version."""
    if state.shadow is None:
        return None
    shadow = (min(1.0, max(0.0, model.shadow_percent / 100.0)), versions[state.shadow])
    for number, entry in versions.items():
        if number != state.shadow:
            entry.shadow = shadow
    return shadow


def step_entry(snapshot: dict[str, ModelEntry], step) -> VersionEntry | None:
    """The entry of the version a step pins (``step.model``, ``step.version``:
    an ensemble's step, or a step of a segment a worker runs) in
    ``snapshot``; None when it is gone."""
    model = snapshot.get(step.model)
    return model.versions.get(step.version) if model is not None else None
