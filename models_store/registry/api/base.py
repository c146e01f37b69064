"""What the registry's API views share: the operations' ids (drf-spectacular's
own, from the paths, kept stable for generated clients), the OpenAPI links
between the operations, and :class:`RegistryView` (the models the caller may see)."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter
from rest_framework.exceptions import ParseError

from models_store.registry import actions
from models_store.registry.serializers import ModelDetailSerializer
from models_store.web.api import ManagementView
from models_store.web.openapi import OpenApiLink

LIST_MODELS = "models_list"
GET_MODEL = "models_retrieve"
UPDATE_MODEL = "models_partial_update"
DELETE_MODEL = "models_destroy"
LIST_VERSIONS = "models_versions_list"
UPLOAD_VERSION = "models_versions_create"
GET_VERSION = "models_versions_retrieve"
DELETE_VERSION = "models_versions_destroy"
RETIRE_VERSION = "models_versions_retire_create"
RESTORE_VERSION = "models_versions_restore_create"
PROMOTE_VERSION = "models_versions_promote_create"
UPDATE_VERSION = "models_versions_partial_update"
COMPARE_VERSIONS = "models_versions_compare_retrieve"
SET_LABEL = "models_labels_update"
DELETE_LABEL = "models_labels_destroy"
AUDIT_LOG = "models_audit_list"
SET_TRAFFIC = "models_traffic_update"
PROMOTE_CANARY = "models_traffic_promote_create"
ROLLBACK_CANARY = "models_traffic_rollback_create"
GET_SHADOW = "models_shadow_retrieve"
SET_SHADOW = "models_shadow_update"
CLEAR_SHADOW = "models_shadow_destroy"


def version_links(name: str, number: str, only: tuple[str, ...] = ()) -> tuple[OpenApiLink, ...]:
    """Links to the operations on one version (``name``, ``number``: runtime
    expressions); ``only`` these links when given."""
    where = {"name": name, "number": number}
    links = (
        OpenApiLink("GetVersion", GET_VERSION, where, description="The version."),
        OpenApiLink("RetireVersion", RETIRE_VERSION, where, description="Stop serving the version."),
        OpenApiLink("RestoreVersion", RESTORE_VERSION, where, description="Serve the retired version again."),
        OpenApiLink("PromoteVersion", PROMOTE_VERSION, where, description="Release the held version."),
        OpenApiLink("DeleteVersion", DELETE_VERSION, where, description="Delete the version."),
        OpenApiLink("UpdateVersion", UPDATE_VERSION, where, description="Change its description and tags."),
    )
    return tuple(link for link in links if not only or link.name in only)


#: The model list's search (:class:`models_store.registry.selectors.ModelFilter`).
SEARCH_PARAMETERS = (
    OpenApiParameter(
        "q", str, description="Only models whose name, description or a version's description contains this (any case)."
    ),
    OpenApiParameter(
        "tag",
        str,
        many=True,
        explode=True,
        description="Only models that (or a version of which) have this tag: 'key', or 'key=value' for that value "
        "exactly; repeat for all of several.",
    ),
)


def force_parameter(description: str) -> OpenApiParameter:
    """The ``?force=true`` query parameter of a change the signature guard may refuse."""
    return OpenApiParameter("force", bool, description=description)


def query_force(request) -> bool:
    """``?force=true`` or ``false`` (the default); ParseError (400) for anything else."""
    force = request.query_params.get("force", "false").lower()
    if force not in ("true", "false"):
        raise ParseError("force is true or false")
    return force == "true"


def model_links(name: str) -> tuple[OpenApiLink, ...]:
    """Links to the operations on one model (``name``: a runtime expression)."""
    where = {"name": name}
    return (
        OpenApiLink("GetModel", GET_MODEL, where, description="The model."),
        OpenApiLink("UpdateModel", UPDATE_MODEL, where, description="Change its description or version policy."),
        OpenApiLink("ListVersions", LIST_VERSIONS, where, description="Its versions."),
        OpenApiLink("UploadVersion", UPLOAD_VERSION, where, description="Upload its next version."),
        OpenApiLink("GetAuditLog", AUDIT_LOG, where, description="Its audit log."),
        OpenApiLink("SetTraffic", SET_TRAFFIC, where, description="Split its unversioned requests between labels."),
        OpenApiLink("PromoteCanary", PROMOTE_CANARY, where, description="Promote its canary to stable."),
        OpenApiLink("RollbackCanary", ROLLBACK_CANARY, where, description="Send all its traffic to stable."),
        OpenApiLink("GetShadow", GET_SHADOW, where, description="Its shadow traffic and the comparison."),
    )


def traffic_links() -> tuple[OpenApiLink, ...]:
    where = {"name": "$request.path.name"}
    return (
        OpenApiLink("GetModel", GET_MODEL, where, description="The model."),
        OpenApiLink("PromoteCanary", PROMOTE_CANARY, where, description="Promote the canary to stable."),
        OpenApiLink("RollbackCanary", ROLLBACK_CANARY, where, description="Send all traffic to stable."),
        OpenApiLink("GetAuditLog", AUDIT_LOG, where, description="The audit log (traffic changes)."),
    )


class RegistryView(ManagementView):
    """A management API view of the registry: the models the caller may see."""

    def visible(self, name: str):
        """The model ``name`` if the caller may see it, else 404 (:func:`actions.visible_model`)."""
        return actions.visible_model(self.request.user, self.token, name)

    def detail(self, name: str):
        """The model ``name`` with its versions and labels prefetched, if the caller may see it, else 404."""
        return actions.visible_model(self.request.user, self.token, name, prefetched=True)

    def model_body(self, name: str) -> dict:
        """The model as :class:`ModelDetailSerializer` answers it, if the caller may see it."""
        return ModelDetailSerializer(self.detail(name)).data
