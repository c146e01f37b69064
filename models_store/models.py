"""The model registry: registered models, their versions, and a change stamp.

Writes go through :mod:`models_store.services`, reads through
:mod:`models_store.selectors`. Every write bumps :class:`RegistryStamp` in the
same transaction so that server processes notice the change (see
``inference/registry.py``).
"""

from __future__ import annotations

from django.core.validators import RegexValidator
from django.db import models

MODEL_NAME_RE = r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}$"
model_name_validator = RegexValidator(
    MODEL_NAME_RE,
    "A model name starts with a letter or digit and holds only letters, digits, '_', '.' and '-' "
    "(at most 128 characters).",
)

PLATFORM_ONNX = "onnxruntime_onnx"


class VersionPolicy(models.TextChoices):
    """Triton's version policy: which versions of a model are served."""

    LATEST = "latest", "Latest N"
    ALL = "all", "All"
    SPECIFIC = "specific", "Specific"


class RegisteredModel(models.Model):
    """A named model; its versions hold the artifacts.

    ``version_policy`` with ``latest_versions`` / ``specific_versions`` decides
    which READY versions serve; ``max_batch_size`` and ``instance_group``
    follow Triton's model configuration; ``config`` keeps the imported
    config.pbtxt as JSON. ``last_version_number`` only grows, so version
    numbers are never reused, even after a delete.
    """

    name = models.CharField(max_length=128, unique=True, validators=[model_name_validator])
    description = models.TextField(blank=True)
    platform = models.CharField(max_length=64, default=PLATFORM_ONNX)
    max_batch_size = models.PositiveIntegerField(default=0)
    version_policy = models.CharField(max_length=16, choices=VersionPolicy.choices, default=VersionPolicy.LATEST)
    latest_versions = models.PositiveIntegerField(default=1)
    specific_versions = models.JSONField(default=list, blank=True)
    instance_group = models.JSONField(default=list, blank=True)
    config = models.JSONField(default=dict, blank=True)
    #: False after a repository "unload": nothing serves until "load"; no version is deleted.
    loaded = models.BooleanField(default=True)
    last_version_number = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class ModelVersion(models.Model):
    """One immutable artifact of a model, numbered by the registry.

    ``artifact`` is a path relative to MODEL_STORE_DIR (content-addressed by
    sha256). ``inputs``/``outputs`` are the signature extracted from the ONNX
    graph: lists of ``{"name", "datatype", "shape"}`` with ``-1`` for
    variable dimensions. ``reason`` explains a FAILED or UNAVAILABLE state.
    """

    class State(models.TextChoices):
        UPLOADED = "UPLOADED"
        VALIDATING = "VALIDATING"
        LOADING = "LOADING"
        READY = "READY"
        FAILED = "FAILED"
        UNAVAILABLE = "UNAVAILABLE"

    model = models.ForeignKey(RegisteredModel, related_name="versions", on_delete=models.CASCADE)
    number = models.PositiveIntegerField()
    artifact = models.CharField(max_length=512)
    sha256 = models.CharField(max_length=64, db_index=True)
    size = models.BigIntegerField()
    platform = models.CharField(max_length=64, default=PLATFORM_ONNX)
    inputs = models.JSONField(default=list, blank=True)
    outputs = models.JSONField(default=list, blank=True)
    properties = models.JSONField(default=dict, blank=True)
    state = models.CharField(max_length=16, choices=State.choices, default=State.UPLOADED, db_index=True)
    reason = models.TextField(blank=True)
    source = models.CharField(max_length=1024, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["model__name", "-number"]
        constraints = [
            models.UniqueConstraint(fields=["model", "number"], name="unique_version_number"),
            models.UniqueConstraint(fields=["model", "sha256"], name="unique_version_sha256"),
        ]

    def __str__(self) -> str:
        return f"{self.model.name}:{self.number}"


class RegistryStamp(models.Model):
    """A single row whose ``counter`` grows with every registry write."""

    counter = models.BigIntegerField(default=0)
    changed_at = models.DateTimeField(auto_now=True)


label_validator = RegexValidator(
    r"^[A-Za-z0-9_][A-Za-z0-9_\-]{0,63}$",
    "A version label holds letters, digits, '_' and '-' (at most 64 characters).",
)


class VersionLabel(models.Model):
    """A name (``stable``, ``canary``) for one version of a model, as TF
    Serving's version labels. It may only be set on a READY version."""

    model = models.ForeignKey(RegisteredModel, related_name="labels", on_delete=models.CASCADE)
    name = models.CharField(max_length=64, validators=[label_validator])
    version = models.ForeignKey(ModelVersion, related_name="labels", on_delete=models.CASCADE)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["model__name", "name"]
        constraints = [models.UniqueConstraint(fields=["model", "name"], name="unique_label_per_model")]

    def __str__(self) -> str:
        return f"{self.model.name}@{self.name}"
