"""The registry's tables: registered models, their versions, and version labels.

Writes go through :mod:`models_store.registry.services` (a version's
``state`` only through :mod:`models_store.registry.services.states`), reads
through :mod:`models_store.registry.selectors`. Every write bumps the change
stamp (:mod:`models_store.stamp`) in the same transaction so that server
processes notice the change (see ``inference/serving/registry.py``).
"""

from __future__ import annotations

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models

from models_store.identifiers import label_validator, model_name_validator

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
    config.pbtxt as JSON. ``traffic`` splits requests that name no version
    between version labels by weight. ``last_version_number`` only grows, so version
    numbers are never reused, even after a delete. ``team`` owns the model
    (its members change it); a model without a team is operator-owned:
    only superusers change it.
    """

    name = models.CharField(max_length=128, unique=True, validators=[model_name_validator])
    description = models.TextField(blank=True)
    #: Free key -> value tags to find models by (as MLflow's): :mod:`models_store.registry.tags`.
    tags = models.JSONField(default=dict, blank=True)
    team = models.ForeignKey(
        "models_store.Team", related_name="models", null=True, blank=True, on_delete=models.PROTECT
    )
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, related_name="+", null=True, blank=True, on_delete=models.SET_NULL
    )
    platform = models.CharField(max_length=64, default=PLATFORM_ONNX)
    max_batch_size = models.PositiveIntegerField(default=0)
    version_policy = models.CharField(max_length=16, choices=VersionPolicy.choices, default=VersionPolicy.LATEST)
    latest_versions = models.PositiveIntegerField(default=1)
    specific_versions = models.JSONField(default=list, blank=True)
    instance_group = models.JSONField(default=list, blank=True)
    config = models.JSONField(default=dict, blank=True)
    #: Class labels of outputs, read from the files config.pbtxt names in an
    #: output's ``label_filename`` (one label per line): output name -> labels.
    output_labels = models.JSONField(default=dict, blank=True)
    #: False after a repository "unload": nothing serves until "load"; no version is deleted.
    loaded = models.BooleanField(default=True)
    #: Traffic split of requests that name no version: version label -> weight
    #: (integers summing to 100), e.g. {"stable": 90, "canary": 10}; {} : none.
    traffic = models.JSONField(default=dict, blank=True)
    #: Payload logging (opt-in): the share of inferences whose request and
    #: response are sent to the operators' sink (PAYLOAD_LOG_SINK); 0: off.
    payload_log_rate = models.FloatField(default=0.0, validators=[MinValueValidator(0), MaxValueValidator(1)])
    #: A logged pair holds its tensors only up to this many bytes (else their shapes only).
    payload_log_max_bytes = models.PositiveIntegerField(default=65536)
    #: Shadow traffic: a copy of ``shadow_percent`` percent (0..100) of the model's requests runs on
    #: ``shadow_version`` after the live answer, its answers compared with the live ones and discarded
    #: (inference/shadow/traffic.py); None: no shadow traffic (a deleted shadow version ends it).
    shadow_version = models.ForeignKey(
        "models_store.ModelVersion", related_name="+", null=True, blank=True, on_delete=models.SET_NULL
    )
    shadow_percent = models.FloatField(default=0.0, validators=[MinValueValidator(0), MaxValueValidator(100)])
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
    variable dimensions. ``reason`` explains a FAILED or UNAVAILABLE state;
    ``log`` holds the validation steps (one line each). An upload goes
    UPLOADED -> VALIDATING -> READY or FAILED; a retired version is
    UNAVAILABLE (the state machine: :mod:`models_store.registry.services.states`).
    ``held``: a READY version whose signature would break the callers of the
    model's default route is kept from the version policy's choice until a
    person promotes it (``reason`` says why; a label or split may still route to it).
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
    platform = models.CharField(max_length=64, default=PLATFORM_ONNX, db_index=True)  # finds the ensembles
    inputs = models.JSONField(default=list, blank=True)
    outputs = models.JSONField(default=list, blank=True)
    properties = models.JSONField(default=dict, blank=True)
    state = models.CharField(max_length=16, choices=State.choices, default=State.UPLOADED, db_index=True)
    reason = models.TextField(blank=True)
    held = models.BooleanField(default=False)
    log = models.JSONField(default=list, blank=True)
    source = models.CharField(max_length=1024, blank=True)
    #: What people say of this version, and its tags (key -> value), both editable after the upload.
    description = models.TextField(blank=True)
    tags = models.JSONField(default=dict, blank=True)
    uploaded_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, related_name="+", null=True, blank=True, on_delete=models.SET_NULL
    )
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
