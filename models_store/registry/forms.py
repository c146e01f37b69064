"""Forms of the web UI's registry pages: a model's settings, a version label, an
upload (every one is posted with Django's CSRF token)."""

from __future__ import annotations

from django import forms
from django.core.validators import RegexValidator

from inference.serving import instance_groups
from models_store.config.triton import MAX_CONFIG_CHARS
from models_store.errors import RegistryError
from models_store.identifiers import MODEL_NAME_RE, label_validator
from models_store.registry import tags as tag_rules
from models_store.registry.models import PLATFORM_ONNX, VersionPolicy


def parse_version_numbers(text: str) -> list[int]:
    """``"1, 3 4"`` -> ``[1, 3, 4]``; raises forms.ValidationError for anything else."""
    parts = text.replace(",", " ").split()
    if not all(p.isdigit() and int(p) > 0 for p in parts):
        raise forms.ValidationError("list version numbers (positive integers) separated by commas")
    return sorted({int(p) for p in parts})


INSTANCE_KINDS = [("KIND_AUTO", "any device (GPUs first)"), ("KIND_GPU", "GPU"), ("KIND_CPU", "CPU")]


def parse_gpu_numbers(text: str) -> list[int]:
    """``"0, 1"`` -> ``[0, 1]``; raises forms.ValidationError for anything else."""
    parts = text.replace(",", " ").split()
    if not all(p.isdigit() for p in parts):
        raise forms.ValidationError("list GPU numbers (0, 1, ...) separated by commas")
    return sorted({int(p) for p in parts})


def _tags_field() -> forms.CharField:
    return forms.CharField(
        widget=forms.Textarea(attrs={"rows": 3, "class": "code", "placeholder": "owner=fraud-team\ndataset=iris-2024"}),
        required=False, help_text="one key=value a line (a key alone: an empty value); lists search by them",
    )  # fmt: skip


def clean_tags_text(text: str) -> dict[str, str]:
    """The tags typed in a form (:func:`models_store.registry.tags.parse_text`); forms.ValidationError otherwise."""
    try:
        return tag_rules.parse_text(text)
    except RegistryError as exc:
        raise forms.ValidationError(str(exc)) from None


#: What an ensemble's settings form leaves out: its steps run on their own models' instances (Triton
#: refuses an instance_group in an ensemble's configuration).
INSTANCE_FIELDS = ("instance_kind", "instance_gpus", "instance_count")


class ModelSettingsForm(forms.Form):
    """Description, tags, version policy, instance group (not an ensemble's) and payload logging of a model."""

    description = forms.CharField(widget=forms.Textarea(attrs={"rows": 2}), required=False)
    tags = _tags_field()
    version_policy = forms.ChoiceField(choices=VersionPolicy.choices)
    latest_versions = forms.IntegerField(min_value=1, initial=1, label="Latest N")
    specific_versions = forms.CharField(required=False, label="Specific versions", help_text="e.g. 1, 3")

    instance_kind = forms.ChoiceField(choices=INSTANCE_KINDS, label="Runs on", required=False)
    instance_gpus = forms.CharField(required=False, label="GPUs", help_text="for GPU: e.g. 0, 1 (empty: any GPU)")
    instance_count = forms.IntegerField(min_value=1, initial=1, label="Instances", required=False)
    payload_log_rate = forms.FloatField(
        min_value=0, max_value=1, initial=0, required=False, label="Payload logging",
        help_text="share of inferences logged, request and response (0: off; e.g. 0.01)",
    )  # fmt: skip
    payload_log_max_bytes = forms.IntegerField(
        min_value=0, initial=65536, required=False, label="Payload log size cap",
        help_text="bytes of tensors a logged pair holds (beyond: shapes only)",
    )  # fmt: skip
    force = forms.BooleanField(
        required=False, label="Even if it breaks callers",
        help_text="go ahead although the version that would serve changes the signature callers use (audited)",
    )  # fmt: skip

    def __init__(self, *args, platform: str = PLATFORM_ONNX, **kwargs):
        super().__init__(*args, **kwargs)
        if platform == "ensemble":
            for key in INSTANCE_FIELDS:
                del self.fields[key]

    @classmethod
    def for_model(cls, model, group) -> ModelSettingsForm:
        """The form filled in with ``model``'s settings (``group``: its first instance group)."""
        initial = {
            "description": model.description,
            "tags": tag_rules.as_text(model.tags),
            "version_policy": model.version_policy,
            "latest_versions": model.latest_versions,
            "specific_versions": ", ".join(map(str, model.specific_versions)),
            "instance_kind": group.kind,
            "instance_gpus": ", ".join(map(str, group.gpus)),
            "instance_count": group.count,
            "payload_log_rate": model.payload_log_rate,
            "payload_log_max_bytes": model.payload_log_max_bytes,
        }
        return cls(initial=initial, platform=model.platform)

    def clean_tags(self) -> dict[str, str]:
        return clean_tags_text(self.cleaned_data["tags"])

    def new_tags(self) -> dict[str, str] | None:
        """The tags from the form; None when the form did not carry them (no change)."""
        return self.cleaned_data["tags"] if "tags" in self.data else None

    def clean_specific_versions(self) -> list[int]:
        return parse_version_numbers(self.cleaned_data["specific_versions"])

    def clean_instance_gpus(self) -> list[int]:
        return parse_gpu_numbers(self.cleaned_data["instance_gpus"])

    def instance_group(self) -> list[dict] | None:
        """Triton's instance group (worker mode placement) from the form; None
        when the form did not carry it (no change)."""
        data = self.cleaned_data
        if "instance_kind" not in self.fields or not data.get("instance_kind"):
            return None
        count = data["instance_count"] or instance_groups.DEFAULT_COUNT
        return [{"kind": data["instance_kind"], "count": count, "gpus": data["instance_gpus"]}]

    def payload_logging(self) -> dict:
        """Payload logging from the form (fields left empty: unchanged)."""
        data = self.cleaned_data
        return {key: data[key] for key in ("payload_log_rate", "payload_log_max_bytes") if data.get(key) is not None}

    def policy(self) -> dict:
        data = self.cleaned_data
        return {key: data[key] for key in ("version_policy", "latest_versions", "specific_versions")}


class LabelForm(forms.Form):
    """Point a version label at a READY version."""

    label = forms.CharField(max_length=64, validators=[label_validator], help_text="e.g. stable, canary")
    # A select of the READY versions; any number is accepted here, so that the
    # registry answers a missing or not READY version with its own message.
    version = forms.IntegerField(min_value=1, widget=forms.Select())
    force = forms.BooleanField(
        required=False, label="Even if it breaks callers",
        help_text="go ahead although the version that would serve changes the signature callers use (audited)",
    )  # fmt: skip

    def __init__(self, *args, ready_versions: list[int] = (), **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["version"].widget.choices = [(n, f"version {n}") for n in ready_versions]


CONFIG_PLACEHOLDER = 'max_batch_size: 8\ninput [ { name: "x" format: FORMAT_NCHW } ]'


class UploadForm(forms.Form):
    """A model file (and its model's config.pbtxt, optional), or an
    ensemble's config.pbtxt alone, and for a new model its name, team and
    description."""

    name = forms.CharField(
        max_length=128,
        validators=[RegexValidator(MODEL_NAME_RE, "letters, digits, '_', '.', '-'; starting with a letter or digit")],
        help_text="the model name used in inference URLs",
    )
    team = forms.ChoiceField(choices=(), help_text="the team that owns the new model")
    description = forms.CharField(widget=forms.Textarea(attrs={"rows": 2}), required=False)
    config = forms.CharField(
        label="Triton config.pbtxt (optional)",
        widget=forms.Textarea(attrs={"rows": 4, "class": "code", "placeholder": CONFIG_PLACEHOLDER}),
        required=False,
        strip=False,
        max_length=MAX_CONFIG_CHARS,
        help_text="replaces the model's configuration; a field this server does not support is refused by name",
    )
    file = forms.FileField(
        required=False, help_text='an ONNX model (.onnx); none for an ensemble (config.pbtxt with platform: "ensemble")'
    )

    def __init__(self, *args, teams: list[str] = (), existing_model: str | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["team"].choices = [(t, t) for t in teams]
        if existing_model is not None:
            for key in ("name", "team", "description"):
                del self.fields[key]


class ShadowForm(forms.Form):
    """Shadow traffic: the version that gets a copy of a percentage of the model's requests."""

    version = forms.TypedChoiceField(coerce=int, label="Shadow version")
    percent = forms.FloatField(
        min_value=0, max_value=100, initial=10, label="Percent of requests",
        help_text="copied after their live answers; the copies' answers are compared and discarded",
    )  # fmt: skip

    def __init__(self, *args, versions=(), **kwargs):
        """``versions``: the version numbers offered (READY, not what the default route serves)."""
        super().__init__(*args, **kwargs)
        self.fields["version"].choices = [(n, f"version {n}") for n in versions]


class VersionNotesForm(forms.Form):
    """What people say of a version: its description and tags."""

    description = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 3}), required=False, max_length=tag_rules.MAX_DESCRIPTION
    )
    tags = _tags_field()

    def clean_tags(self) -> dict[str, str]:
        return clean_tags_text(self.cleaned_data["tags"])

    @classmethod
    def for_version(cls, version) -> VersionNotesForm:
        """The form filled in with ``version``'s description and tags."""
        return cls(initial={"description": version.description, "tags": tag_rules.as_text(version.tags)})
