"""The model configuration extension's answer: a model's Triton
configuration (``GET /v2/models/<m>/config``, gRPC ``ModelConfig``), as
Triton returns it.

Triton answers with the model's config.pbtxt after normalization and its
backend's auto-completion, written by core ``ModelConfigToJson``: proto
field names, every field without presence printed with its default (empty
lists and maps included), enums by name, 64-bit integers as numbers. This
module builds the same from three sources:

- the registry's live state: name, platform and backend (ONNX Runtime),
  ``max_batch_size``, ``version_policy`` and ``instance_group`` (which the
  web UI, the management API and a repository load may change), normalized
  as Triton does (inference/serving/instance_groups.py: named, ``KIND_AUTO``
  resolved to the devices the server runs on, one group named after the
  model when there is none);
- the version's signature (auto-completion, as Triton's ONNX Runtime
  backend does from the model file): every input and output with its
  ``data_type`` and ``dims`` (without the batch dimension when
  ``max_batch_size > 0``), in the order config.pbtxt lists them, then the
  graph's others; the config's own attributes of a tensor (``format``,
  ``optional``, ``label_filename``) are kept;
- the config as imported (``ModelEntry.config``, already in Triton's JSON
  form: models_store/config ``triton_json``): ``dynamic_batching`` (an
  empty ``preferred_batch_size`` becomes ``[max_batch_size]``, Triton's
  normalization), ``parameters``, ``model_warmup``,
  ``default_model_filename`` (``model.onnx`` when not given),
  ``model_transaction_policy`` (off) and ``response_cache`` (as configured, else off);
- the registry's sequence batching policy, normalized as Triton does
  (``sequence_batching``: inference/runtime/sequences/policy.py);
- for an ensemble (``platform: "ensemble"``): its ``ensemble_scheduling``
  with the version each step pins (inference/ensembles/plan.py), no backend,
  instance group or model file.

No protobuf here (the data plane's layer may not import the gRPC adapter's
messages): the gRPC adapter parses this dict into its ModelConfig message.
"""

from __future__ import annotations

import copy

from inference.ensembles.plan import PLATFORM as ENSEMBLE
from inference.protocol.datatypes import BY_NAME
from inference.serving import instance_groups

#: Defaults Triton prints for the messages built here (fields without presence).
INPUT_DEFAULTS = {
    "name": "",
    "data_type": "TYPE_INVALID",
    "format": "FORMAT_NONE",
    "dims": [],
    "is_shape_tensor": False,
    "allow_ragged_batch": False,
    "optional": False,
    "is_non_linear_format_io": False,
}
OUTPUT_DEFAULTS = {
    "name": "",
    "data_type": "TYPE_INVALID",
    "dims": [],
    "label_filename": "",
    "is_shape_tensor": False,
    "is_non_linear_format_io": False,
}
GROUP_DEFAULTS = {
    "name": "",
    "kind": "KIND_AUTO",
    "count": 0,
    "gpus": [],
    "secondary_devices": [],
    "profile": [],
    "passive": False,
    "host_policy": "",
}
DYNAMIC_BATCHING_DEFAULTS = {
    "preferred_batch_size": [],
    "max_queue_delay_microseconds": 0,
    "preserve_ordering": False,
    "priority_levels": 0,
    "default_priority_level": 0,
    "priority_queue_policy": {},
}
#: Top-level fields without presence, in Triton's order, and their defaults.
TOP_DEFAULTS = {
    "batch_input": [],
    "batch_output": [],
    "default_model_filename": "model.onnx",
    "cc_model_filenames": {},
    "metric_tags": {},
    "parameters": {},
    "model_warmup": [],
}
#: The order Triton writes the top-level fields in (ModelConfig's declaration order).
ORDER = (
    "name", "platform", "backend", "runtime", "version_policy", "max_batch_size", "input", "output",
    "batch_input", "batch_output", "optimization", "dynamic_batching", "sequence_batching", "ensemble_scheduling",
    "instance_group", "default_model_filename", "cc_model_filenames", "metric_tags", "parameters", "model_warmup",
    "model_operations", "model_transaction_policy", "model_repository_agents", "response_cache", "model_metrics",
)  # fmt: skip


def version_policy(kind: str, latest: int, specific) -> dict:
    """A registry version policy in Triton's JSON form."""
    if kind == "all":
        return {"all": {}}
    if kind == "specific":
        return {"specific": {"versions": [int(v) for v in specific]}}
    return {"latest": {"num_versions": int(latest)}}


def _tensors(signature, configured: list, defaults: dict, batched: bool) -> list[dict]:
    """Signature tensors in the config's order (then the graph's others),
    each the config's entry (when it has one) with the signature's data
    type and dims."""
    by_name = {t.name: t for t in signature}
    order = [c["name"] for c in configured if c.get("name") in by_name]
    order += [t.name for t in signature if t.name not in order]
    given = {c.get("name"): c for c in configured}
    out = []
    for name in order:
        tensor = by_name[name]
        item = {**defaults, **copy.deepcopy(given.get(name, {}))}
        item["name"] = name
        item["data_type"] = BY_NAME[tensor.datatype].triton
        item["dims"] = list(tensor.shape[1:] if batched else tensor.shape)
        out.append(item)
    return out


def _groups(name: str, groups, gpus) -> list[dict]:
    """The registry's instance groups as Triton reports them after its
    normalization on a server with GPUs ``gpus``
    (:func:`inference.serving.instance_groups.triton_form`), with Triton's other fields."""
    return [{**GROUP_DEFAULTS, **group} for group in instance_groups.triton_form(name, groups, gpus)]


def render(model, entry, gpus=()) -> dict:
    """The Triton configuration of ``model`` (a registry ModelEntry) with the
    signature of ``entry`` (a VersionEntry; None: no inputs or outputs) as a
    JSON-ready dict in Triton's form; ``gpus``: the GPU numbers the server
    runs models on (none: CPU only), which resolve ``KIND_AUTO`` groups."""
    stored = copy.deepcopy(model.config or {})
    batched = model.max_batch_size > 0
    config = {
        **stored,
        "name": model.name,
        "platform": model.platform,
        "backend": "onnxruntime",
        "runtime": "",
        "version_policy": version_policy(*model.policy),
        "max_batch_size": model.max_batch_size,
        "input": _tensors(entry.inputs, stored.get("input", []), INPUT_DEFAULTS, batched) if entry else [],
        "output": _tensors(entry.outputs, stored.get("output", []), OUTPUT_DEFAULTS, batched) if entry else [],
        "instance_group": _groups(model.name, model.instance_group, gpus),
    }
    for key, default in TOP_DEFAULTS.items():
        if not config.get(key):
            config[key] = copy.deepcopy(default)
    config.pop("dynamic_batching", None)
    if model.batching is not None:  # it serves with max_batch_size > 0, or with priority levels or a queue policy
        batching = {**DYNAMIC_BATCHING_DEFAULTS, **stored.get("dynamic_batching", {})}
        for key in ("max_queue_delay_microseconds", "priority_levels", "default_priority_level"):
            batching[key] = int(batching[key])  # a config stored before 64-bit integers were numbers
        if not batching["preferred_batch_size"] and model.max_batch_size > 0:
            batching["preferred_batch_size"] = [model.max_batch_size]
        config["dynamic_batching"] = batching
    config.pop("sequence_batching", None)
    if model.sequence is not None:  # normalized as Triton normalizes it (inference/runtime/sequences/policy.py)
        config["sequence_batching"] = model.sequence.echo()
    config.setdefault("model_transaction_policy", {"decoupled": False})
    config.setdefault("response_cache", {"enable": False})
    if model.platform == ENSEMBLE:
        _as_ensemble(config, entry)
    return {key: config[key] for key in ORDER if key in config}


def _as_ensemble(config: dict, entry) -> None:
    """An ensemble's configuration as Triton reports one (no backend, no
    instance groups, no model file), its steps with the versions ``entry``
    (an ensemble version) pins in ``model_version``."""
    config["backend"] = ""
    config["instance_group"] = []
    config["default_model_filename"] = ""
    plan = entry.ensemble if entry is not None else None
    if plan is None:
        return
    config["ensemble_scheduling"] = {
        "step": [
            {
                "model_name": step.model,
                "model_version": step.version,
                "input_map": dict(step.input_map),
                "output_map": dict(step.output_map),
                "model_namespace": "",
            }
            for step in plan.steps
        ]
    }
