"""Ensemble versions in the registry: a config.pbtxt with ``platform:
"ensemble"`` becomes a version that pins the versions of the models it
composes (the data plane runs it: inference/ensembles/plan.py).

An ensemble version has no model file. Its plan (the steps with their
pinned versions, :class:`inference.ensembles.plan.Plan`) is kept in the
version's ``properties["ensemble"]``, its ``sha256`` is the sha256 of the
plan's canonical JSON (the same ensemble uploaded twice is a duplicate, as
the same bytes are), ``artifact`` is empty and ``size`` 0. It is checked
when it is created, so it is READY at once or refused:

- it has at most ``ENSEMBLE_MAX_STEPS`` steps (checked first, before any
  step is looked up: :func:`check_model`; docs/ensembles.md says why 64);
- every step's model exists and is visible to the ensemble's team (the
  same team or an operator-owned model; an operator-owned ensemble may
  compose any model), and is neither an ensemble itself nor a model with
  sequence batching (a step's request belongs to no sequence);
- ``model_version: -1`` pins the version that serves then (the one a
  request naming no version gets); a number must name a READY version;
- the graph is acyclic, every tensor a step reads is an ensemble input or
  written by a step, every ensemble output is written
  (:func:`inference.ensembles.plan.check_graph`);
- each mapped tensor exists on the pinned version, every input it needs is
  mapped, and datatypes are equal and shapes compatible (-1 matches any
  size; the ensemble's dims gain a batch dimension when its
  ``max_batch_size`` is above 0, as Triton's do).

While a READY ensemble (of a loaded model) runs a version, that version
serves whatever its model's version policy says, and deleting or retiring
it, deleting its model or unloading it is refused (409:
:func:`models_store.registry.services.versions.ensemble_blockers`).

Spec: https://github.com/triton-inference-server/server/blob/main/docs/user_guide/ensemble_models.md
"""

from __future__ import annotations

import hashlib
import json

from django.conf import settings
from django.db import transaction

from inference.ensembles.plan import PLATFORM, EnsembleError, Plan, Step
from models_store.config.triton import TritonConfig
from models_store.registry import selectors
from models_store.registry.services import models as model_services
from models_store.registry.services import states

State = states.State


class EnsembleRefused(ValueError):
    """The ensemble cannot be created; ``conflict``: because of the
    registry's current state (409: a version that is not READY, a model
    serving nothing) rather than a malformed ensemble (400)."""

    def __init__(self, message: str, conflict: bool = False):
        super().__init__(message)
        self.conflict = conflict


def _full_shape(dims, batched: bool) -> list[int]:
    return ([-1] if batched else []) + [int(d) for d in dims]


def _compatible(a, b) -> bool:
    return len(a) == len(b) and all(x == y or x < 0 or y < 0 for x, y in zip(a, b))


def signature(config: TritonConfig) -> tuple[list[dict], list[dict]]:
    """The ensemble's inputs and outputs as a version's signature
    (``{"name", "datatype", "shape"}``, the batch dimension -1 included)."""
    batched = config.max_batch_size > 0
    return tuple(
        [{"name": t.name, "datatype": t.datatype, "shape": _full_shape(t.dims, batched)} for t in tensors]
        for tensors in (config.inputs, config.outputs)
    )


def _composing_model(name: str, team, where: str):
    model = selectors.model_get(name)
    if model is None or (team is not None and model.team_id not in (None, team.pk)):
        owner = f"team {team.name}" if team is not None else "the operators"
        raise EnsembleRefused(f"{where}: unknown model '{name}' (an ensemble of {owner} composes its own models)")
    if model.platform == PLATFORM:
        raise EnsembleRefused(f"{where}: model '{name}' is an ensemble; ensembles of ensembles are not supported")
    if (model.config or {}).get("sequence_batching") is not None:
        raise EnsembleRefused(f"{where}: model '{name}' has sequence batching; it cannot be an ensemble's step")
    return model


def _pinned_version(model, configured: int, where: str):
    if configured == -1:
        number = selectors.serving(model).default
        if number is None:
            raise EnsembleRefused(f"{where}: model '{model.name}' serves no version now", conflict=True)
    else:
        number = configured
    version = selectors.version_get(model, number)
    if version is None:
        raise EnsembleRefused(f"{where}: model '{model.name}' has no version {number}", conflict=True)
    if version.state != State.READY:
        raise EnsembleRefused(
            f"{where}: version {number} of model '{model.name}' is {version.state}, not READY", conflict=True
        )
    return version


def build_plan(config: TritonConfig, team) -> tuple[Plan, list[str]]:
    """The ensemble's plan with its versions pinned, and the log lines of
    its checks; ``team``: the ensemble's Team (None: operator-owned).
    Raises EnsembleRefused naming the step and what is wrong."""
    inputs, outputs = signature(config)
    steps, versions, log = [], {}, []
    for number, configured in enumerate(config.ensemble, 1):
        where = f"step {number}"
        model = _composing_model(configured.model_name, team, where)
        version = _pinned_version(model, configured.model_version, where)
        steps.append(
            Step(
                number,
                model.name,
                version.number,
                configured.input_map,
                configured.output_map,
                configured.model_version,
            )
        )
        versions[number] = (model, version)
        how = "the version serving now" if configured.model_version == -1 else "as configured"
        log.append(f"step {number}: model '{model.name}' version {version.number} ({how})")
    try:
        plan = Plan(tuple(t["name"] for t in inputs), tuple(t["name"] for t in outputs), tuple(steps))
    except EnsembleError as exc:
        raise EnsembleRefused(str(exc)) from None
    _check_tensors(plan, versions, inputs, outputs)
    log.append(f"ensemble checked: {len(steps)} step(s); datatypes and shapes agree")
    return plan, log


def _check_tensors(plan: Plan, versions: dict, inputs: list[dict], outputs: list[dict]) -> None:
    """Each mapped tensor exists on its pinned version with a compatible
    datatype and shape; every needed input is mapped; the outputs fit."""
    known = {t["name"]: (t["datatype"], t["shape"], "the ensemble's input") for t in inputs}
    done: set[int] = set()
    while len(done) < len(plan.steps):  # in dependency order: what a step reads is known before it
        for step in plan.steps:
            if step.number in done or not plan.waits[step.number] <= done:
                continue
            model, version = versions[step.number]
            where = f"step {step.number} (model '{model.name}' version {version.number})"
            _check_step(step, model, version, where, known)
            done.add(step.number)
    for tensor in outputs:
        datatype, shape, source = known[tensor["name"]]
        if datatype != tensor["datatype"] or not _compatible(shape, tensor["shape"]):
            raise EnsembleRefused(
                f"ensemble output '{tensor['name']}' is declared {tensor['datatype']} {tensor['shape']}, "
                f"but {source} is {datatype} {shape}"
            )


def _check_step(step: Step, model, version, where: str, known: dict) -> None:
    step_inputs = {t["name"]: t for t in version.inputs}
    optional = selectors.optional_inputs(model)
    for name, tensor in step.input_map.items():
        spec = step_inputs.get(name)
        if spec is None:
            raise EnsembleRefused(f"{where} has no input '{name}' (inputs: {', '.join(step_inputs)})")
        datatype, shape, source = known[tensor]
        if datatype != spec["datatype"] or not _compatible(shape, spec["shape"]):
            raise EnsembleRefused(
                f"{where}: input '{name}' is {spec['datatype']} {spec['shape']}, "
                f"but '{tensor}' ({source}) is {datatype} {shape}"
            )
    missing = [name for name in step_inputs if name not in step.input_map and name not in optional]
    if missing:
        raise EnsembleRefused(f"{where}: input(s) {', '.join(missing)} not mapped (input_map)")
    step_outputs = {t["name"]: t for t in version.outputs}
    for name, tensor in step.output_map.items():
        spec = step_outputs.get(name)
        if spec is None:
            raise EnsembleRefused(f"{where} has no output '{name}' (outputs: {', '.join(step_outputs)})")
        known[tensor] = (spec["datatype"], spec["shape"], f"output '{name}' of step {step.number}")


def config_sha256(config: TritonConfig) -> str:
    """The sha256 (hex) of the configuration an ensemble version was made
    from (its canonical JSON): a repository import leaves an ensemble
    unchanged while it has a version made from the same config.pbtxt."""
    return hashlib.sha256(json.dumps(config.raw, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def check_model(model, name: str, config: TritonConfig) -> None:
    """Raise EnsembleRefused unless ``model`` (a RegisteredModel; None: to be
    created) can take an ensemble version of ``config`` (its number of steps first)."""
    limit = settings.ENSEMBLE_MAX_STEPS
    if len(config.ensemble) > limit:
        raise EnsembleRefused(
            f"the ensemble has {len(config.ensemble)} steps; at most {limit} are allowed (ENSEMBLE_MAX_STEPS)"
        )
    if config.name and config.name != name:
        raise EnsembleRefused(f"the config names the model {config.name!r}, not {name!r}")
    if model is not None and model.platform != PLATFORM and model.versions.exists():
        raise EnsembleRefused(
            f"model '{name}' is an ONNX model; an ensemble is a model of its own (choose another name)",
            conflict=True,
        )


@transaction.atomic
def version_create(model, config: TritonConfig, *, actor=None, source: str, action: str, preferred_number=None):
    """Check and create an ensemble version of ``model`` (a RegisteredModel;
    READY), applying ``config`` to the model (its platform becomes
    ``ensemble``; audited as ``model.config`` when it changes; an upload's
    announced to the team's webhooks as ``version.ready``). Raises
    EnsembleRefused, and DuplicateVersion when the model has this plan
    already. The guards against deleting, retiring or unloading what it
    runs are the registry's (:func:`models_store.registry.services.versions.ensemble_blockers`)."""
    locked = model_services.model_lock(model=model)
    check_model(locked, locked.name, config)
    plan, log = build_plan(config, locked.team)
    inputs, outputs = signature(config)
    model_services.model_set_ensemble_config(model=locked, config=config, actor=actor, source=source)
    properties = {"ensemble": plan.as_json(), "config_sha256": config_sha256(config)}
    return states.version_create(
        model=locked, artifact="", sha256=plan.sha256(), size=0, state=State.READY, inputs=inputs,
        outputs=outputs, properties=properties, log=log, source=source, uploaded_by=actor,
        preferred_number=preferred_number, action=action, platform=PLATFORM,
        announce=action == "version.upload",  # READY at once: what a validated upload announces (an import: none)
    )  # fmt: skip
