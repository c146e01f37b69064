"""Import a Triton-style model repository into the registry.

Layout: ``<root>/<model>/config.pbtxt`` (optional) and
``<root>/<model>/<version>/model.onnx`` (or the config's
``default_model_filename``). Importing is idempotent: a file whose sha256
the model already has is left alone. A new file gets the directory's number
when that number is above every number the model has used, otherwise the
next free number (numbers are never reused). A file that fails validation
becomes a FAILED version with its reason; other models and versions still
import and serve.

An ensemble (config.pbtxt with ``platform: "ensemble"``, its version
directory empty, as in Triton's repositories) is imported after every
other model, so that the versions it composes exist: each version
directory becomes a READY ensemble version pinning them
(models_store/intake/ensembles.py), or a failed result with the reason (nothing
is stored). It is unchanged while the model has a version made from the
same config.pbtxt.

With ``strict`` (``serve --strict-model-config``, Triton's; also
``--disable-auto-complete-config``) the configuration is not completed from
the ONNX file: a model directory without a config.pbtxt declaring its inputs
and outputs fails (its new versions FAILED with the reason).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import onnx
from django.conf import settings

from inference.runtime.shared_weights import Sharing
from models_store import storage
from models_store.accounts import services as accounts
from models_store.config.triton import ConfigError, TritonConfig, parse_config
from models_store.errors import RegistryError
from models_store.identifiers import model_name_validator
from models_store.intake import ensembles, validation
from models_store.intake.validating import tensor_json
from models_store.registry import selectors
from models_store.registry.services import models as model_services
from models_store.registry.services import states


@dataclass(frozen=True)
class ImportResult:
    model: str
    directory: str  # the version directory name, or "" for model-level results
    outcome: str  # created | unchanged | failed | skipped
    version: int | None = None
    message: str = ""

    def __str__(self) -> str:
        where = f"{self.model}/{self.directory}" if self.directory else self.model
        version = f" -> version {self.version}" if self.version is not None else ""
        message = f": {self.message}" if self.message else ""
        return f"{self.outcome:9} {where}{version}{message}"


#: Largest label file read (Triton's label_filename).
MAX_LABEL_FILE_BYTES = 16 << 20


#: How an imported version's ``source`` starts (:func:`import_source`).
IMPORT_SOURCE = "import: "


def import_source(version_dir: Path) -> str:
    """What a version imported from ``version_dir`` records as its source
    (on the version, in the audit log, in the UI and the API): the
    directory relative to the repository, e.g. ``import: iris/1``; never
    the server's file-system path."""
    return f"{IMPORT_SOURCE}{version_dir.parent.name}/{version_dir.name}"


def _read_labels(model_dir: Path, output: str, filename: str) -> list[str]:
    """The labels of an output's ``label_filename``: one per line of a file
    in the model's directory. Raises ConfigError otherwise."""
    where = f"config.pbtxt: output '{output}' label_filename {filename!r}"
    parts = Path(filename).parts
    if not filename or Path(filename).is_absolute() or ".." in parts:
        raise ConfigError(f"{where} must name a file inside the model's directory")
    path = model_dir / filename
    if any((model_dir / Path(*parts[:i])).is_symlink() for i in range(1, len(parts) + 1)) or not path.is_file():
        raise ConfigError(f"{where} is not a file in the model's directory")
    if path.stat().st_size > MAX_LABEL_FILE_BYTES:
        raise ConfigError(f"{where} is larger than {MAX_LABEL_FILE_BYTES} bytes")
    try:
        return path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError:
        raise ConfigError(f"{where} is not UTF-8 text") from None


#: Why a model fails under ``strict`` (no automatic completion of its configuration).
STRICT_NO_CONFIG = "config.pbtxt is required: automatic completion of the configuration is disabled (strict)"
STRICT_NO_TENSORS = (
    "config.pbtxt must declare the model's inputs and outputs: automatic completion of the configuration "
    "is disabled (strict)"
)


def _read_config(model_dir: Path, strict: bool = False) -> tuple[TritonConfig | None, dict, str]:
    """(config, output labels, error): the parsed config.pbtxt and the labels
    of its outputs' label files, or the reason it is unusable (``strict``:
    also a missing file, or one that leaves out the inputs or outputs)."""
    path = model_dir / "config.pbtxt"
    if not path.is_file():
        return None, {}, STRICT_NO_CONFIG if strict else ""
    try:
        config = parse_config(path.read_text(encoding="utf-8"))
        labels = {t.name: _read_labels(model_dir, t.name, t.label_filename) for t in config.outputs if t.label_filename}
    except (ConfigError, UnicodeDecodeError) as exc:
        return None, {}, str(exc)
    if config.name and config.name != model_dir.name:
        return None, {}, f"config.pbtxt names the model {config.name!r} but its directory is {model_dir.name!r}"
    if strict and not config.ensemble and not (config.inputs and config.outputs):
        return None, {}, STRICT_NO_TENSORS
    return config, labels, ""


def _version_dirs(model_dir: Path) -> list[Path]:
    dirs = [p for p in model_dir.iterdir() if p.is_dir() and p.name.isdigit() and int(p.name) > 0]
    return sorted(dirs, key=lambda p: int(p.name))


def _import_version(
    model, version_dir: Path, filename: str, config, config_error: str, sharing: Sharing | None = None
) -> ImportResult:
    model_file = version_dir / filename
    if not model_file.is_file():
        return ImportResult(model.name, version_dir.name, "skipped", message=f"no {filename} in the directory")
    try:
        proto = onnx.load(str(model_file), load_external_data=False)
        extra = validation.external_data_files(proto, version_dir)
        reason = config_error
    except validation.ValidationError as exc:
        extra, reason = [], str(exc)
    except Exception as exc:  # not ONNX at all: stored so that users can inspect it
        extra, reason = [], f"not a readable ONNX model: {exc}"
    sha256, _ = storage.digest_files([model_file, *extra])
    existing = selectors.version_by_sha256(model, sha256)
    if existing is not None:
        return ImportResult(model.name, version_dir.name, "unchanged", existing.number)
    stored = storage.store_files(model.name, model_file, extra)
    signature = None
    if not reason:
        try:
            path = storage.artifact_path(stored.relpath)
            signature = validation.validate_artifact(path, config, sharing=sharing, sha256=stored.sha256)
        except validation.ValidationError as exc:
            reason = str(exc)
    version = states.version_create(
        model=model,
        artifact=stored.relpath,
        sha256=stored.sha256,
        size=stored.size,
        state=states.State.FAILED if reason else states.State.READY,
        inputs=[tensor_json(t) for t in signature.inputs] if signature else [],
        outputs=[tensor_json(t) for t in signature.outputs] if signature else [],
        properties=signature.properties if signature else {},
        reason=reason,
        source=import_source(version_dir),
        preferred_number=int(version_dir.name),
    )
    message = reason
    if version.number != int(version_dir.name):
        message = f"directory {version_dir.name} holds new bytes; registered as version {version.number}" + (
            f"; {reason}" if reason else ""
        )
    return ImportResult(model.name, version_dir.name, "failed" if reason else "created", version.number, message)


def _import_team(name: str | None):
    """The team that imported models without one get: ``name``, else the
    REPOSITORY_TEAM setting; None (operator-owned models) when both are empty."""
    name = name if name is not None else settings.REPOSITORY_TEAM
    return accounts.team_get_or_create(name=name) if name else None


def import_repository(
    root: Path,
    team: str | None = None,
    *,
    strict: bool = False,
    only: set[str] | None = None,
    sharing: Sharing | None = None,
) -> list[ImportResult]:
    """Import every model directory under ``root`` (``only``: those of these
    names); see the module docstring (``strict``: no automatic completion of
    the configuration; ``sharing``: the serving machine's way of sharing big
    models' weights, whose copies validation then writes, as for uploads,
    :mod:`inference.runtime.shared_weights`). Models that have no team get ``team`` (default: the
    REPOSITORY_TEAM setting; empty: they stay operator-owned, changed by
    superusers only).

    Raises FileNotFoundError when ``root`` is not a directory.
    """
    root = Path(root)
    if not root.is_dir():
        raise FileNotFoundError(f"model repository {root} is not a directory")
    owner = _import_team(team)
    results: list[ImportResult] = []
    deferred = []
    for model_dir in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
        if only is not None and model_dir.name not in only:
            continue
        try:
            model_name_validator(model_dir.name)
        except Exception:
            results.append(ImportResult(model_dir.name, "", "skipped", message="not a valid model name"))
            continue
        config, labels, config_error = _read_config(model_dir, strict)
        if config is not None and config.ensemble:
            deferred.append((model_dir, config))
            continue
        model = model_services.model_upsert(name=model_dir.name, config=config, team=owner, output_labels=labels)
        filename = (config.default_model_filename if config else "") or storage.MODEL_FILENAME
        versions = _version_dirs(model_dir)
        if config_error:  # also when every version is unchanged: the config is not applied
            results.append(ImportResult(model.name, "", "failed", message=config_error))
        if not versions:
            results.append(ImportResult(model.name, "", "skipped", message="no numbered version directories"))
        for version_dir in versions:
            results.append(_import_version(model, version_dir, filename, config, config_error, sharing))
    for model_dir, config in deferred:
        results.extend(_import_ensemble(model_dir, config, owner))
    return results


def _import_ensemble(model_dir: Path, config: TritonConfig, owner) -> list[ImportResult]:
    """The results of an ensemble's directory: one per version directory."""
    name = model_dir.name
    versions = _version_dirs(model_dir)
    if not versions:
        return [ImportResult(name, "", "skipped", message="no numbered version directories")]
    model = selectors.model_get(name)
    try:
        ensembles.check_model(model, name, config)
    except ensembles.EnsembleRefused as exc:
        return [ImportResult(name, "", "failed", message=str(exc))]
    if model is None:
        model = model_services.model_upsert(name=name, team=owner)
    made_from = ensembles.config_sha256(config)
    results = []
    for version_dir in versions:
        existing = selectors.version_by_config(model, made_from)
        if existing is not None:
            results.append(ImportResult(name, version_dir.name, "unchanged", existing.number))
            continue
        try:
            version = ensembles.version_create(
                model, config, source=import_source(version_dir), action="version.import",
                preferred_number=int(version_dir.name),
            )  # fmt: skip
        except (ensembles.EnsembleRefused, RegistryError) as exc:
            results.append(ImportResult(name, version_dir.name, "failed", message=str(exc)))
            continue
        results.append(ImportResult(name, version_dir.name, "created", version.number))
    return results
