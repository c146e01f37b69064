"""The management API's rollouts of a model (docs/rollouts.md "Progressive
rollouts"): start one, list them, read one (its steps and analyses), and
pause, resume, promote now or abort it. Changes need the permission to
change the model (as moving a version label); each is audited."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.response import Response

from models_store.rollouts import actions, selectors
from models_store.rollouts.serializers import RolloutSerializer, RolloutStartSerializer
from models_store.web.api import PAGE_PARAMETERS, ManagementView
from models_store.web.openapi import LinkedResponse, OpenApiLink, errors, paginated

LIST_ROLLOUTS = "models_rollouts_list"
START_ROLLOUT = "models_rollouts_create"
GET_ROLLOUT = "models_rollouts_retrieve"
CHANGE = {change: f"models_rollouts_{change}_create" for change in actions.CHANGES}

E404 = "no such model or rollout (or a model the caller may not see)"


def _links(rollout: str) -> tuple[OpenApiLink, ...]:
    where = {"name": "$request.path.name", "rollout": rollout}
    return (
        OpenApiLink("GetRollout", GET_ROLLOUT, where, description="The rollout, its steps and analyses."),
        OpenApiLink("PauseRollout", CHANGE["pause"], where, description="Pause it."),
        OpenApiLink("ResumeRollout", CHANGE["resume"], where, description="Resume it."),
        OpenApiLink("PromoteRollout", CHANGE["promote"], where, description="Promote its version now."),
        OpenApiLink("AbortRollout", CHANGE["abort"], where, description="Roll it back now."),
    )


class RolloutListView(ManagementView):
    permission_actions = {"GET": "model.view", "POST": "rollout.manage"}  # models_store.accounts.permissions

    @extend_schema(
        operation_id=LIST_ROLLOUTS,
        parameters=PAGE_PARAMETERS,
        responses={
            200: LinkedResponse(
                paginated(RolloutSerializer), description="A page of the model's rollouts, newest first.",
                links=_links("$response.body#/results/0/id"),
            ),
            **errors(400, 401, 404, e404="no such model (or one the caller may not see)"),
        },
    )  # fmt: skip
    def get(self, request, name: str):
        """A page of the model's rollouts (``limit``/``offset``), newest first."""
        model = actions.visible_model(request.user, self.token, name)
        return self.page(selectors.rollouts_of(model), RolloutSerializer)

    @extend_schema(
        operation_id=START_ROLLOUT,
        request=RolloutStartSerializer,
        responses={
            201: LinkedResponse(RolloutSerializer, description="Started: the canary has the first step's weight.",
                                links=_links("$response.body#/id")),
            **errors(
                400, 401, 403, 404, 409, 415,
                e409="the model has a rollout running or paused, or no such version, or it is not READY, or it is "
                "the stable version, or nothing serves, or the steps do not increase to 100, or its signature "
                "would break the callers (see differences; force to do it anyway)",
            ),
        },
    )  # fmt: skip
    def post(self, request, name: str):
        """Start a progressive rollout of a READY version: label ``stable``
        stays on the version callers use now, label ``canary`` moves to the
        new one, and the traffic split gives it each step's weight in turn;
        each step is judged from the rollups (error rate, p99) when its
        pause ends: it advances, promotes at the last, or rolls back.
        Audited (``rollout.started``)."""
        serializer = RolloutStartSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = dict(serializer.validated_data)
        if "steps" in data:
            data["steps"] = list(data["steps"])
        rollout = actions.rollout_start(request.user, self.token, name, data.pop("canary_version"), **data)
        return Response(RolloutSerializer(rollout).data, status=status.HTTP_201_CREATED)


class RolloutDetailView(ManagementView):
    permission_actions = {"GET": "model.view"}  # models_store.accounts.permissions

    @extend_schema(
        operation_id=GET_ROLLOUT,
        responses={
            200: LinkedResponse(RolloutSerializer, description="The rollout.", links=_links("$request.path.rollout")),
            **errors(401, 404, e404=E404),
        },
    )
    def get(self, request, name: str, rollout: int):
        """A rollout: its state, steps (the current one: ``step``) and analyses."""
        return Response(RolloutSerializer(actions.rollout_get(request.user, self.token, name, rollout)).data)


def _change_view(change: str, summary: str, e409: str) -> type[ManagementView]:
    class RolloutChangeView(ManagementView):
        permission_actions = {"POST": "rollout.manage"}  # models_store.accounts.permissions

        @extend_schema(
            operation_id=CHANGE[change],
            request=None,
            responses={200: RolloutSerializer, **errors(401, 403, 404, 409, e404=E404, e409=e409)},
            description=summary,
        )
        def post(self, request, name: str, rollout: int):
            changed = actions.rollout_change(request.user, self.token, name, rollout, change)
            return Response(RolloutSerializer(changed).data)

    RolloutChangeView.__name__ = f"Rollout{change.title()}View"
    return RolloutChangeView


RolloutPauseView = _change_view(
    "pause", "Pause a running rollout: its step is not judged until it resumes. Audited (`rollout.paused`).",
    "the rollout is not running",
)  # fmt: skip
RolloutResumeView = _change_view(
    "resume", "Resume a paused rollout: its step's labels and split are set again and the step starts over. "
    "Audited (`rollout.resumed`).", "the rollout is not paused, or the registry refuses its routes now",
)  # fmt: skip
RolloutPromoteView = _change_view(
    "promote", "Promote now: label `stable` moves to the canary's version and the split ends. Audited "
    "(`rollout.promoted`).", "the rollout has ended, or label `canary` is no longer on its version",
)  # fmt: skip
RolloutAbortView = _change_view(
    "abort", "Abort: every unversioned request goes to `stable` again (split `stable` 100, `canary` 0). "
    "Audited (`rollout.aborted`).", "the rollout has ended",
)  # fmt: skip
