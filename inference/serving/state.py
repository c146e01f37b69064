"""A model's serving state, computed in one place: which versions serve and
which one answers a request that names none.

The serving registry (:mod:`inference.serving.registry`: the V2/Triton and TF
Serving protocols), the management API and the web UI all read it from
:func:`serving_state`, so that they never disagree. It follows Triton's model
repository semantics:

- only READY versions of a *loaded* model can serve; a model unloaded
  through the repository API (``POST /v2/repository/models/<m>/unload``)
  serves none (Triton: `model repository extension
  <https://github.com/triton-inference-server/server/blob/main/docs/protocol/extension_model_repository.md>`_);
- the version policy (Triton ``version_policy``: ``latest`` N, ``all``,
  ``specific``) picks among the READY versions that are not *held* (a
  version whose signature would break the default route's callers waits for
  a person to promote it: models_store/registry/services/states.py) (`Version Policy
  <https://github.com/triton-inference-server/server/blob/main/docs/user_guide/model_configuration.md#version-policy>`_);
  a failed upload therefore never takes the serving version offline;
- a traffic split (version label -> weight) keeps the versions it routes to
  serving whatever the policy says, as a canary rollout keeps both;
- so does a READY ensemble (of a loaded model) for the versions it pins
  (inference/ensembles/plan.py): an ensemble keeps running what it was built on;
- a version label on a held version serves it to the callers naming the
  label (a canary), never to those naming no version;
- a shadow version (a copy of a share of the model's requests runs on it,
  inference/shadow/traffic.py) serves while it is READY, never as the
  default;
- an ensemble's version serves only while its plan reads and every version
  it pins serves (:func:`serving_states`, which sees every model: the
  serving registry's snapshot and the management API both use it);
- the *default version* (metadata, configuration and readiness of a request
  naming no version) is the split's heaviest route, else the highest
  version served that is not held;
- a sequence batching configuration the server refuses serves nothing.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from inference.ensembles import plan as ensembles
from inference.runtime.sequences.policy import SequenceConfigError, SequencePolicy

READY = "READY"
UNLOADED = "the model is unloaded (repository API); load it to serve"


def served_versions(policy: str, ready: Iterable[int], latest: int = 1, specific: Iterable[int] = ()) -> list[int]:
    """The READY version numbers that ``policy`` serves, highest first.

    ``policy`` is ``latest`` (the ``latest`` highest), ``all``, or
    ``specific`` (those listed in ``specific``). Raises ValueError for an
    unknown policy or a ``latest`` count below 1.
    """
    numbers = sorted(set(ready), reverse=True)
    if policy == "latest":
        if latest < 1:
            raise ValueError("a latest policy serves at least 1 version")
        return numbers[:latest]
    if policy == "all":
        return numbers
    if policy == "specific":
        wanted = set(specific)
        return [n for n in numbers if n in wanted]
    raise ValueError(f"unknown version policy {policy!r}")


def traffic_routes(traffic: dict, labels: dict, ready: Iterable[int]) -> list[tuple[str, int, int]]:
    """The traffic split of a model as ``(label, version, weight)``, by label,
    for the entries that can take traffic: weight above 0 and a label that
    points at a READY version (an entry whose label was deleted, or whose
    version stopped being READY, is skipped: its share goes to the others).

    ``traffic``: version label -> weight (integers, summing to 100 when set);
    ``labels``: version label -> version number.
    """
    ready_set = set(ready)
    routes = []
    for label, weight in sorted(traffic.items()):
        number = labels.get(label)
        if weight > 0 and number in ready_set:
            routes.append((label, number, int(weight)))
    return routes


def sequence_refusal(record) -> str:
    """Why the model's sequence batching configuration keeps it from serving
    ("" when it has none or it is accepted)."""
    if record.sequence_batching is None:
        return ""
    try:
        SequencePolicy.from_config(record.sequence_batching, record.max_batch_size, record.name)
    except SequenceConfigError as exc:
        return f"sequence_batching: {exc}"
    return ""


@dataclass(frozen=True, slots=True)
class ServingState:
    """What of a model serves now.

    ``served``: the version numbers that serve, highest first (also those
    listed in model metadata and counted in statistics); ``routes``: the
    traffic split that takes requests naming no version, ``(label, version,
    weight)``, () without one; ``default``: the version a request naming
    none sees (None: nothing serves); ``loaded``: False after a repository
    unload; ``refused``: why nothing serves although versions are READY
    because the configuration is refused ("" otherwise); ``blocked``: an
    ensemble's versions that the policy serves but that cannot run now,
    version number -> why (:func:`serving_states`); ``shadow``: the READY
    shadow version that gets copies of the model's requests (None: none).
    """

    served: tuple[int, ...]
    routes: tuple[tuple[str, int, int], ...]
    default: int | None
    loaded: bool
    refused: str
    policy: str
    blocked: dict = field(default_factory=dict)
    held: frozenset = frozenset()
    shadow: int | None = None

    def serves(self, number: int) -> bool:
        return number in self.served and number not in self.blocked

    def reason(self, number: int, state: str, stored: str = "") -> str:
        """Why version ``number`` (in ``state``, with the registry's own
        ``stored`` reason) does not serve; ``stored`` when it is not READY,
        "" when it serves."""
        if state != READY:
            return stored
        if not self.loaded:
            return UNLOADED
        if self.refused:
            return self.refused
        if number in self.blocked:
            return self.blocked[number]
        if number in self.held and not self.serves(number):
            return stored or f"version {number} is held: promote it, or point a version label at it"
        if not self.serves(number):
            return f"version {number} is not served by the model's version policy ({self.policy})"
        return stored


def serving_state(record) -> ServingState:
    """The serving state of ``record`` (an :class:`inference.ports.ModelRecord`:
    its versions' numbers, states and holds, version policy, labels, traffic
    split, ``loaded`` and sequence batching)."""
    ready = [v.number for v in record.versions if v.state == READY] if record.loaded else []
    refused = sequence_refusal(record)
    if refused:
        ready = []
    held = {v.number for v in record.versions if getattr(v, "held", False)} & set(ready)
    chosen = [n for n in ready if n not in held]
    served = served_versions(record.version_policy, chosen, record.latest_versions, record.specific_versions)
    routes = traffic_routes(record.traffic or {}, record.labels, ready)
    pinned = set(getattr(record, "pinned", ())) & set(ready)
    served = sorted(set(served) | {number for _label, number, _weight in routes} | pinned, reverse=True)
    default = next((n for n in served if n not in held), None)
    if routes:  # the heaviest route (the first by label on a tie)
        default = max(routes, key=lambda route: route[2])[1]
    labelled = held & set(record.labels.values())
    shadow = getattr(record, "shadow_version", None)
    shadowed = {shadow} & set(ready) if shadow is not None and getattr(record, "shadow_percent", 0) > 0 else set()
    return ServingState(
        served=tuple(sorted(set(served) | labelled | shadowed, reverse=True)),
        routes=tuple(routes),
        default=default,
        loaded=record.loaded,
        refused=refused,
        policy=record.version_policy,
        held=frozenset(held),
        shadow=shadow if shadowed else None,
    )


def _step_refusal(record, state: ServingState | None, number: int) -> str:
    """Why version ``number`` of ``record`` (a step's model) cannot run ("" when it serves)."""
    version = next((v for v in record.versions if v.number == number), None) if record is not None else None
    if version is None:
        return "does not exist"
    if not state.serves(number):
        return f"does not serve ({state.reason(number, version.state, version.reason) or version.state})"
    return ""


def serving_states(records: Iterable) -> dict[str, ServingState]:
    """The serving state of each record (model name -> :func:`serving_state`),
    with an ensemble's versions that cannot run ``blocked``: its plan does not
    read, or a version it pins does not exist or does not serve (naming the
    step). ``records``: every model an ensemble among them pins must be there."""
    records = list(records)
    by_name = {record.name: record for record in records}
    states = {record.name: serving_state(record) for record in records}
    for record in records:
        if record.platform != ensembles.PLATFORM:
            continue
        state, blocked = states[record.name], {}
        for version in record.versions:
            if not state.serves(version.number):
                continue
            plan = ensembles.plan_of(version.properties)
            if plan is None:
                blocked[version.number] = "its ensemble plan does not read (upload the ensemble again)"
                continue
            for step in plan.steps:
                why = _step_refusal(by_name.get(step.model), states.get(step.model), step.version)
                if why:
                    blocked[version.number] = (
                        f"step {step.number}: version {step.version} of model '{step.model}' {why}"
                    )
                    break
        if blocked:
            states[record.name] = replace(state, blocked=blocked)
    return states
