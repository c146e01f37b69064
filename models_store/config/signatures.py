"""What a configuration given after import (a repository load's
``config``, an upload's config.pbtxt) may say about a model whose versions
are validated: it may not change their signatures."""

from __future__ import annotations

from models_store.config.triton import ConfigError, TritonConfig


def check_against_versions(model, config: TritonConfig, versions, validating: bool = False) -> None:
    """Raise ConfigError unless ``config`` fits the validated ``versions``
    of ``model`` (a RegisteredModel): each configured input and output is
    one they have, with their data type and dims; ``max_batch_size > 0``
    only when every tensor has a variable first dimension; an ``optional``
    input only where the model's config already had it (it was validated as
    one; ``validating``: a new version will be validated with ``config``, so
    it may mark an input optional); a ``label_filename`` only the imported
    one (label files are read at import)."""
    batched = config.max_batch_size > 0
    before = {t.get("name"): t for t in (model.config or {}).get("input", [])}
    labels = {t.get("name"): t.get("label_filename", "") for t in (model.config or {}).get("output", [])}
    for version in versions:
        for kind, configured, signature in (
            ("input", config.inputs, version.inputs),
            ("output", config.outputs, version.outputs),
        ):
            tensors = {t["name"]: t for t in signature}
            for conf in configured:
                tensor = tensors.get(conf.name)
                if tensor is None:
                    raise ConfigError(f"version {version.number} has no {kind} '{conf.name}'")
                if conf.datatype and conf.datatype != tensor["datatype"]:
                    raise ConfigError(
                        f"{kind} '{conf.name}' of version {version.number} is {tensor['datatype']}, not {conf.datatype}"
                    )
                shape = list(tensor["shape"])
                dims = shape[1:] if batched else shape
                if conf.dims and list(conf.dims) != dims:
                    raise ConfigError(
                        f"{kind} '{conf.name}' of version {version.number} has dims {dims}, not {list(conf.dims)}: "
                        "a load cannot change a validated signature (upload a new version)"
                    )
                if kind == "input" and conf.format != "FORMAT_NONE" and len(dims) != 3:
                    raise ConfigError(f"model input NHWC/NCHW require 3 dims (input '{conf.name}' has {dims})")
            for tensor in signature:
                if batched and (not tensor["shape"] or tensor["shape"][0] >= 0):
                    raise ConfigError(
                        f"max_batch_size is {config.max_batch_size} but '{tensor['name']}' of version "
                        f"{version.number} has no variable first (batch) dimension: {tensor['shape']}"
                    )
    for conf in config.inputs:
        if conf.optional and not validating and not before.get(conf.name, {}).get("optional"):
            raise ConfigError(
                f"input '{conf.name}' was not validated as optional: give it in config.pbtxt and import the model"
            )
    for conf in config.outputs:
        if conf.label_filename and conf.label_filename != labels.get(conf.name, ""):
            raise ConfigError(
                f"output '{conf.name}' label_filename {conf.label_filename!r}: label files are read when the "
                "model's repository is imported"
            )
