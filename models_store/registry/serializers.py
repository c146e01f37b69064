"""Serializers of the management API's registry resources: models, model
versions, uploads, version labels, traffic splits, version policies, audit
events.

Everything the OpenAPI schema says about a field comes from here (through
drf-spectacular): nullable fields are ``allow_null``, bounds are
``min_value``/``max_value``, names carry the registry's patterns
(:mod:`models_store.identifiers`), and input text may not hold NUL
characters (:mod:`models_store.web.fields`).
"""

from __future__ import annotations

from django.core.validators import RegexValidator
from drf_spectacular.extensions import OpenApiSerializerExtension
from drf_spectacular.utils import PolymorphicProxySerializer, extend_schema_field
from rest_framework import serializers

from inference.serving import instance_groups
from models_store.audit import AuditEvent
from models_store.config.triton import MAX_CONFIG_CHARS
from models_store.errors import RegistryError
from models_store.identifiers import MAX_VERSION_NUMBER, team_name_validator
from models_store.registry import listing, selectors
from models_store.registry import tags as tag_rules
from models_store.registry.models import ModelVersion, RegisteredModel, VersionPolicy
from models_store.registry.services.models import MAX_PAYLOAD_LOG_BYTES
from models_store.web.fields import Boolean, ErrorSerializer, Integer, Number, TextField

#: Bounds of an instance group: instances per group and GPU numbers.
MAX_INSTANCES = 1024
MAX_GPU = 1023


class TensorSerializer(serializers.Serializer):
    """One input or output of a model's signature; -1 marks a variable dimension."""

    name = serializers.CharField()
    datatype = serializers.CharField(help_text="Open Inference Protocol datatype: FP32, INT64, BYTES, ...")
    shape = serializers.ListField(child=serializers.IntegerField())


def _serving(serializer, model):
    """:func:`selectors.serving` with the ensembles' pins read once per answer
    (kept in the root serializer's context: one query for a whole list)."""
    context = serializer.context
    if "_ensemble_pins" not in context:
        context["_ensemble_pins"] = selectors.ensemble_pins()
    return selectors.serving(model, context["_ensemble_pins"])


class TagSerializer(serializers.Serializer):
    """One tag: a key (1 to 64 letters, digits, ``_ . - / :``, not starting
    with a symbol) and its value (one line, may be empty)."""

    key = TextField(max_length=tag_rules.MAX_KEY, validators=[RegexValidator(tag_rules.KEY_RE, tag_rules.KEY_RULE)])
    value = TextField(
        required=False, default="", allow_blank=True, trim_whitespace=False, max_length=tag_rules.MAX_VALUE,
        validators=[RegexValidator(r"\A[^\x00\r\n]*\Z", "a tag's value is one line of text")],
    )  # fmt: skip


class TagsField(serializers.ListField):
    """Tags to set, as MLflow's API takes them: a list of ``{"key", "value"}``
    (a key given twice: the last one counts), at most
    :data:`~models_store.registry.tags.MAX_TAGS`; the internal value is a
    dict key -> value checked by :func:`models_store.registry.tags.validate`."""

    child = TagSerializer()

    def __init__(self, **kwargs):
        super().__init__(max_length=tag_rules.MAX_TAGS, **kwargs)

    def to_internal_value(self, data):
        pairs = super().to_internal_value(data)
        try:
            return tag_rules.validate({pair["key"]: pair["value"] for pair in pairs})
        except RegistryError as exc:
            raise serializers.ValidationError(str(exc)) from None


class VersionSerializer(serializers.ModelSerializer):
    """A model version. ``state``: UPLOADED, VALIDATING, READY, FAILED, or
    UNAVAILABLE (retired); ``held``: READY but kept from the version policy's
    choice, its signature breaking the default route's callers, until
    promoted; ``reason`` says why it is FAILED/UNAVAILABLE/held;
    ``log`` lists the validation steps; ``size`` is in bytes;
    ``properties`` are the ONNX model's metadata properties (strings); an
    ensemble's version has its plan instead: ``ensemble`` (the steps with
    their pinned versions, as JSON) and ``config_sha256``; ``description``
    and ``tags`` are what people say of it (``PATCH`` changes them)."""

    model = serializers.CharField(source="model.name", read_only=True)
    tags = serializers.DictField(child=serializers.CharField(), read_only=True)
    inputs = TensorSerializer(many=True, read_only=True)
    outputs = TensorSerializer(many=True, read_only=True)
    properties = serializers.DictField(child=serializers.JSONField(), read_only=True)
    log = serializers.ListField(child=serializers.CharField(), read_only=True)
    labels = serializers.SerializerMethodField()
    serving = serializers.SerializerMethodField()
    uploaded_by = serializers.SerializerMethodField()

    class Meta:
        model = ModelVersion
        fields = [
            "model", "number", "state", "held", "reason", "serving", "labels", "sha256", "size", "platform",
            "inputs", "outputs", "properties", "log", "source", "uploaded_by", "description", "tags", "created_at",
            "updated_at",
        ]  # fmt: skip
        read_only_fields = fields

    def get_labels(self, version) -> list[str]:
        """The version labels that point at this version."""
        return selectors.version_labels(version.model).get(version.pk, [])

    def get_serving(self, version) -> bool:
        """Whether this version serves now (its model loaded, the version
        READY and served by the version policy or the traffic split)."""
        return _serving(self, version.model).serves(version.number)

    def get_uploaded_by(self, version) -> str | None:
        """Who uploaded the version (null: imported from a model repository, or the user is gone)."""
        return version.uploaded_by.get_username() if version.uploaded_by else None


class VersionSummarySerializer(serializers.ModelSerializer):
    class Meta:
        model = ModelVersion
        fields = ["number", "state", "size", "sha256", "created_at"]
        read_only_fields = fields


class InstanceGroupSerializer(serializers.Serializer):
    """Triton's instance group as stored: where worker mode runs the model
    (``kind`` KIND_AUTO, KIND_GPU, KIND_CPU, or KIND_MODEL from a
    config.pbtxt; ``gpus`` only for KIND_GPU)."""

    name = serializers.CharField(read_only=True)
    kind = serializers.CharField(read_only=True)
    count = serializers.IntegerField(read_only=True)
    gpus = serializers.ListField(child=serializers.IntegerField(), read_only=True)


class ModelSerializer(serializers.ModelSerializer):
    """A registered model: its owning team (null: operator-owned, e.g.
    imported from a model repository without ``REPOSITORY_TEAM``), version
    policy, served versions (highest first), version labels (label ->
    version number) and versions."""

    team = serializers.SlugRelatedField(
        slug_field="name",
        read_only=True,
        allow_null=True,
        help_text="The owning team; null for an operator-owned model (only superusers change it).",
    )
    specific_versions = serializers.ListField(child=serializers.IntegerField(), read_only=True)
    tags = serializers.DictField(child=serializers.CharField(), read_only=True)
    instance_group = InstanceGroupSerializer(many=True, read_only=True)
    served_versions = serializers.SerializerMethodField()
    default_version = serializers.SerializerMethodField()
    labels = serializers.SerializerMethodField()
    traffic = serializers.SerializerMethodField()
    versions = VersionSummarySerializer(many=True, read_only=True)

    class Meta:
        model = RegisteredModel
        fields = [
            "name", "team", "description", "tags", "platform", "max_batch_size", "version_policy", "latest_versions",
            "specific_versions", "instance_group", "loaded", "served_versions", "default_version", "labels", "traffic",
            "payload_log_rate", "payload_log_max_bytes", "versions", "created_at", "updated_at",
        ]  # fmt: skip
        read_only_fields = fields

    def get_served_versions(self, model) -> list[int]:
        """The version numbers that serve now, highest first: those the version
        policy and the traffic split serve, none while the model is unloaded
        (``loaded``: false after ``POST /v2/repository/models/<m>/unload``)."""
        return list(_serving(self, model).served)

    def get_default_version(self, model) -> int | None:
        """The version a request that names none sees in metadata and readiness:
        the traffic split's heaviest route, else the highest served version;
        null when nothing serves."""
        return _serving(self, model).default

    def get_labels(self, model) -> dict[str, int]:
        """Version labels: label name -> version number."""
        return selectors.label_numbers(model)

    def get_traffic(self, model) -> dict[str, int]:
        """The traffic split of requests that name no version: version label ->
        weight (percent); empty: they go to the default version."""
        return dict(model.traffic or {})

    def to_representation(self, model) -> dict:
        """The fields above, written directly from the page's details read at
        once (:func:`models_store.registry.listing.page_details`; DRF's
        field-by-field walk over prefetched objects cost about 1 ms a model);
        ``tests/models_store/test_list_representation.py`` holds it to DRF's
        own representation of these fields."""
        listed = _listed(self, model)
        return {
            "name": model.name,
            "team": model.team.name if model.team_id is not None else None,
            "description": model.description,
            "tags": dict(model.tags or {}),
            "platform": model.platform,
            "max_batch_size": model.max_batch_size,
            "version_policy": model.version_policy,
            "latest_versions": model.latest_versions,
            "specific_versions": [int(n) for n in model.specific_versions],
            "instance_group": [_group(group) for group in model.instance_group],
            "loaded": bool(model.loaded),
            "served_versions": list(listed.state.served),
            "default_version": listed.state.default,
            "labels": dict(listed.labels),
            "traffic": dict(model.traffic or {}),
            "payload_log_rate": float(model.payload_log_rate),
            "payload_log_max_bytes": model.payload_log_max_bytes,
            "versions": [
                {"number": number, "state": state, "size": size, "sha256": sha256, "created_at": _when(created)}
                for number, state, size, sha256, created in listed.versions
            ],
            "created_at": _when(model.created_at),
            "updated_at": _when(model.updated_at),
        }


def _listed(serializer, model) -> listing.Listed:
    """``model``'s page details, read once for the whole list being written (the root serializer's instances)."""
    context = serializer.context
    details = context.get("_listed")
    if details is None or model.pk not in details:
        root = serializer.root
        models = list(root.instance) if root is not serializer and root.instance is not None else [model]
        details = context["_listed"] = listing.page_details(models)
    return details[model.pk]


_DATETIME = serializers.DateTimeField()
_when = _DATETIME.to_representation  # ISO 8601 in TIME_ZONE, "Z" for UTC: DRF's own
#: An instance group's fields and how DRF writes them (InstanceGroupSerializer).
_GROUP_FIELDS = (("name", str), ("kind", str), ("count", int), ("gpus", lambda gpus: [int(g) for g in gpus]))


def _group(group: dict) -> dict:
    return {key: write(group[key]) for key, write in _GROUP_FIELDS if key in group}


class ModelDetailSerializer(ModelSerializer):
    versions = VersionSerializer(many=True, read_only=True)

    to_representation = serializers.ModelSerializer.to_representation  # field by field: versions in full


def _gpu_numbers(**kwargs) -> serializers.ListField:
    return serializers.ListField(child=Integer(min_value=0, max_value=MAX_GPU), default=list, **kwargs)


class _GroupFields(serializers.Serializer):
    count = Integer(min_value=1, max_value=MAX_INSTANCES, default=instance_groups.DEFAULT_COUNT)


class GpuInstanceGroupSerializer(_GroupFields):
    """An instance group on GPUs: ``gpus`` lists the GPU numbers (empty: any GPU)."""

    kind = serializers.ChoiceField(choices=[instance_groups.GPU])
    gpus = _gpu_numbers()


class HostInstanceGroupSerializer(_GroupFields):
    """An instance group on the CPU (KIND_CPU) or wherever there is a worker
    (KIND_AUTO, the default); it lists no GPUs."""

    kind = serializers.ChoiceField(
        choices=[instance_groups.AUTO, instance_groups.CPU], default=instance_groups.DEFAULT_KIND
    )
    gpus = _gpu_numbers(max_length=0)


class InstanceGroupChangeSerializer(_GroupFields):
    """One instance group to set: KIND_AUTO (default), KIND_CPU, or KIND_GPU
    with its GPU numbers; ``gpus`` only go with KIND_GPU."""

    kind = serializers.ChoiceField(choices=list(instance_groups.SETTABLE_KINDS), default=instance_groups.DEFAULT_KIND)
    gpus = _gpu_numbers()

    def validate(self, attrs):
        if attrs.get("gpus") and attrs.get("kind") != instance_groups.GPU:
            raise serializers.ValidationError({"gpus": ["gpus are only for KIND_GPU"]})
        return attrs


@extend_schema_field(
    PolymorphicProxySerializer(
        component_name="InstanceGroupChange",
        serializers=[HostInstanceGroupSerializer, GpuInstanceGroupSerializer],
        resource_type_field_name=None,
        many=True,
    )
)
class InstanceGroupListField(serializers.ListField):
    """The instance groups to set, validated by
    :class:`InstanceGroupChangeSerializer`; the schema shows each as one of
    its two shapes (on the host, or on GPUs with ``gpus``)."""

    child = InstanceGroupChangeSerializer()


class ModelUpdateSerializer(serializers.Serializer):
    """Fields to change; all optional. The version policy must serve at least
    one READY version (else 409); ``specific_versions`` and
    ``latest_versions`` are kept from the model when not given."""

    description = TextField(required=False, allow_blank=True)
    tags = TagsField(
        required=False, help_text='Replaces the model\'s tags: [{"key": "owner", "value": "risk"}] ([] removes them).'
    )
    version_policy = serializers.ChoiceField(choices=VersionPolicy.choices, required=False)
    latest_versions = Integer(min_value=1, max_value=MAX_VERSION_NUMBER, required=False)
    specific_versions = serializers.ListField(
        child=Integer(min_value=1, max_value=MAX_VERSION_NUMBER), required=False, allow_empty=False, min_length=1
    )
    instance_group = InstanceGroupListField(required=False)
    force = Boolean(
        required=False,
        default=False,
        help_text="Do it even though a route would serve a version whose signature breaks its callers (audited).",
    )
    payload_log_rate = Number(
        min_value=0,
        max_value=1,
        required=False,
        help_text="Share of inferences whose request and response go to the operators' payload log (0: off).",
    )
    payload_log_max_bytes = Integer(
        min_value=0,
        max_value=MAX_PAYLOAD_LOG_BYTES,
        required=False,
        help_text="A logged pair holds its tensors up to this many bytes (else their names, datatypes and shapes).",
    )


class VersionUpdateSerializer(serializers.Serializer):
    """What people say of a version; both optional (not given: unchanged)."""

    description = TextField(required=False, allow_blank=True, max_length=tag_rules.MAX_DESCRIPTION)
    tags = TagsField(required=False, help_text="Replaces the version's tags ([] removes them).")


@extend_schema_field(
    {
        "type": "string",
        "format": "triton-config",
        "maxLength": MAX_CONFIG_CHARS,
        "description": "A Triton config.pbtxt (protobuf text format) for the model: it replaces the model's "
        "configuration and the new version is validated with it. Malformed text, or a field this server does "
        "not support, is refused (400, naming it). Empty: the model's configuration stays.",
    }
)
class ConfigTextField(TextField):
    """A config.pbtxt: its schema's format (``triton-config``) says that not
    every string is one (the server parses it)."""


class UploadSerializer(serializers.Serializer):
    """Multipart body of an upload: ``file`` (an ONNX model), or ``config``
    alone when it is an ensemble's (its schema says it: :class:`UploadSchema`).
    When the model does not exist yet, the upload creates it for ``team``
    (required then: without it the answer is 404) with ``description``; for
    an existing model both are ignored."""

    file = serializers.FileField(
        required=False,  # an ensemble's upload is its config alone; otherwise refused with the upload's message
        allow_empty_file=True,  # refused by the upload's own checks, with their message
        help_text="The ONNX model file; with its external data files (field data), at most MAX_UPLOAD_BYTES in all. "
        'Not given for an ensemble (config with platform: "ensemble").',
    )
    data = serializers.ListField(
        child=serializers.FileField(allow_empty_file=True),
        required=False,
        help_text="The model's external data files (ONNX's way past 2 GB), each under the file name the model "
        "references (a plain name, no directory). The model must reference every one.",
    )
    team = TextField(
        required=False,
        allow_blank=True,
        trim_whitespace=False,
        validators=[RegexValidator(r"\A[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}\Z", team_name_validator.message)],
        help_text="Required when the upload creates the model: the team that will own it "
        "(one of your teams; an operator may name any team). Empty: not given.",
    )
    description = TextField(required=False, allow_blank=True, help_text="Description of a new model.")
    config = ConfigTextField(required=False, allow_blank=True, trim_whitespace=False, max_length=MAX_CONFIG_CHARS)


#: A config.pbtxt that makes an ensemble (the schema's ``pattern``, ECMA and Python alike): a line that
#: sets ``platform`` to "ensemble". The server reads it as one (:func:`models_store.intake.services.upload`)
#: exactly when it parses and says so, which a line of the top level setting it is (another line setting
#: ``platform`` again, or the line inside a message, does not parse: 400 "config.pbtxt: ...").
ENSEMBLE_CONFIG_PATTERN = "(^|\n)[ \t]*platform[ \t]*:[ \t]*[\"']ensemble[\"']"


class UploadSchema(OpenApiSerializerExtension):
    """The schema of :class:`UploadSerializer`: what drf-spectacular makes of
    it, and (in ``allOf``) ``oneOf`` the two uploads the server takes: a model file (with no
    ensemble's config), or an ensemble's config alone (no file, no data).
    The body is then required (:class:`~models_store.web.openapi.ManagementAutoSchema`)."""

    target_class = UploadSerializer

    def map_serializer(self, auto_schema, direction):
        schema = super().map_serializer(auto_schema, direction)
        # Exactly one of the two: a file with an ensemble's config matches both, so it is neither (no
        # ``not``: schemathesis' coverage phase cannot judge a binary part against one). Inside ``allOf``:
        # the body stays one object for generated clients (openapi-python-client makes a union of a
        # top-level ``oneOf``, and then no multipart body), with the same meaning for a validator.
        schema["allOf"] = [{"oneOf": [
            {
                "title": "a model file",
                "description": "An ONNX file (with its data files) and, optionally, a config that is not an "
                "ensemble's.",
                "required": ["file"],
            },
            {
                "title": "an ensemble",
                "description": 'An ensemble\'s config.pbtxt (a line platform: "ensemble") alone: no file, no data.',
                "required": ["config"],
                "properties": {"config": {"pattern": ENSEMBLE_CONFIG_PATTERN}, "data": {"maxItems": 0}},
            },
        ]}]  # fmt: skip
        return schema


class LabelSerializer(serializers.Serializer):
    """The version a version label points at (must be READY, else 409)."""

    version = Integer(min_value=1, max_value=MAX_VERSION_NUMBER)
    force = Boolean(
        required=False,
        default=False,
        help_text="Do it even though a route would serve a version whose signature breaks its callers (audited).",
    )


class TrafficSerializer(serializers.Serializer):
    """A traffic split: the requests that name no version go to the versions
    of these version labels, by weight (whole percentages adding up to 100,
    else 409; each label must exist and point at a READY version, else 409).
    Empty: no split (the default version answers them)."""

    weights = serializers.DictField(
        child=Integer(min_value=0, max_value=100),
        allow_empty=True,
        help_text='Version label -> weight in percent, e.g. {"stable": 90, "canary": 10}; {} clears the split.',
    )
    force = Boolean(
        required=False,
        default=False,
        help_text="Do it even though a route would serve a version whose signature breaks its callers (audited).",
    )


class UploadFailedSerializer(ErrorSerializer):
    """A 422 of an upload: the error, and the FAILED version that was kept."""

    version = VersionSerializer()


class AuditEventSerializer(serializers.ModelSerializer):
    detail = serializers.DictField(read_only=True, help_text="What changed (depends on the action).")

    class Meta:
        model = AuditEvent
        fields = ["created_at", "actor_name", "action", "model_name", "version_number", "detail"]
        read_only_fields = fields
