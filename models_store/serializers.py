"""Serializers of the management API (models, model versions, labels, audit)."""

from __future__ import annotations

from rest_framework import serializers

from models_store import selectors
from models_store.models import AuditEvent, ModelVersion, RegisteredModel, VersionPolicy


class TensorSerializer(serializers.Serializer):
    """One input or output of a model's signature; -1 marks a variable dimension."""

    name = serializers.CharField()
    datatype = serializers.CharField(help_text="Open Inference Protocol datatype: FP32, INT64, BYTES, ...")
    shape = serializers.ListField(child=serializers.IntegerField())


class VersionSerializer(serializers.ModelSerializer):
    """A model version. ``state``: UPLOADED, VALIDATING, READY, FAILED, or
    UNAVAILABLE (retired); ``reason`` says why it is FAILED/UNAVAILABLE;
    ``log`` lists the validation steps; ``size`` is in bytes."""

    model = serializers.CharField(source="model.name", read_only=True)
    inputs = TensorSerializer(many=True, read_only=True)
    outputs = TensorSerializer(many=True, read_only=True)
    labels = serializers.SerializerMethodField()
    serving = serializers.SerializerMethodField()
    uploaded_by = serializers.SerializerMethodField()

    class Meta:
        model = ModelVersion
        fields = [
            "model", "number", "state", "reason", "serving", "labels", "sha256", "size", "platform",
            "inputs", "outputs", "properties", "log", "source", "uploaded_by", "created_at", "updated_at",
        ]  # fmt: skip
        read_only_fields = fields

    def get_labels(self, version) -> list[str]:
        return sorted(label.name for label in version.model.labels.all() if label.version_id == version.pk)

    def get_serving(self, version) -> bool:
        """Whether the version policy serves this version now."""
        return version.number in selectors.served_numbers(version.model)

    def get_uploaded_by(self, version) -> str | None:
        return version.uploaded_by.get_username() if version.uploaded_by else None


class VersionSummarySerializer(serializers.ModelSerializer):
    class Meta:
        model = ModelVersion
        fields = ["number", "state", "size", "sha256", "created_at"]
        read_only_fields = fields


class ModelSerializer(serializers.ModelSerializer):
    """A registered model: its owning team, version policy, served versions
    (highest first), version labels (label -> version number) and versions."""

    team = serializers.SlugRelatedField(slug_field="name", read_only=True)
    served_versions = serializers.SerializerMethodField()
    labels = serializers.SerializerMethodField()
    versions = VersionSummarySerializer(many=True, read_only=True)

    class Meta:
        model = RegisteredModel
        fields = [
            "name", "team", "description", "platform", "max_batch_size", "version_policy", "latest_versions",
            "specific_versions", "instance_group", "served_versions", "labels", "versions", "created_at", "updated_at",
        ]  # fmt: skip
        read_only_fields = fields

    def get_served_versions(self, model) -> list[int]:
        return selectors.served_numbers(model)

    def get_labels(self, model) -> dict[str, int]:
        return {label.name: label.version.number for label in model.labels.all()}


class ModelDetailSerializer(ModelSerializer):
    versions = VersionSerializer(many=True, read_only=True)


class InstanceGroupSerializer(serializers.Serializer):
    """Triton's instance group: where worker mode runs the model."""

    kind = serializers.ChoiceField(choices=["KIND_AUTO", "KIND_GPU", "KIND_CPU"], default="KIND_AUTO")
    count = serializers.IntegerField(min_value=1, default=1)
    gpus = serializers.ListField(child=serializers.IntegerField(min_value=0), default=list)


class ModelUpdateSerializer(serializers.Serializer):
    """Fields to change; all optional. The version policy must serve at least
    one READY version; GPU numbers only go with KIND_GPU."""

    description = serializers.CharField(required=False, allow_blank=True)
    version_policy = serializers.ChoiceField(choices=VersionPolicy.choices, required=False)
    latest_versions = serializers.IntegerField(min_value=1, required=False)
    specific_versions = serializers.ListField(
        child=serializers.IntegerField(min_value=1), required=False, allow_empty=False
    )
    instance_group = InstanceGroupSerializer(many=True, required=False)


class UploadSerializer(serializers.Serializer):
    """Multipart body of an upload. ``team`` and ``description`` are used when
    the upload creates the model."""

    file = serializers.FileField(help_text="the ONNX model file (self-contained, at most MAX_UPLOAD_BYTES)")
    team = serializers.CharField(required=False, allow_blank=True, help_text="owning team of a new model")
    description = serializers.CharField(required=False, allow_blank=True)


class LabelSerializer(serializers.Serializer):
    """The version a version label points at (must be READY)."""

    version = serializers.IntegerField(min_value=1)


class ErrorSerializer(serializers.Serializer):
    error = serializers.CharField()


class AuditEventSerializer(serializers.ModelSerializer):
    class Meta:
        model = AuditEvent
        fields = ["created_at", "actor_name", "action", "model_name", "version_number", "detail"]
        read_only_fields = fields
