"""The web UI's team pages (``/teams/``): the user's teams and roles; a
team's page with its members (owners add, change and remove them) and its
service accounts with their tokens (owners create and deactivate them, and
create and revoke their tokens; a new token is shown once, after the
redirect). Every change goes through :mod:`models_store.accounts.actions`
(the checks of the management API): a refusal answers its status (403,
404; 400 and 409 on the team's page, with the message)."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from models_store.accounts import actions, permissions, selectors, service_accounts
from models_store.accounts.forms import MemberForm, ServiceAccountForm, ServiceAccountTokenForm
from models_store.accounts.permissions import endpoint
from models_store.accounts.tokens import parse_lifetime
from models_store.errors import AccessDenied, NotFound, Refused, http_status

#: Session key of a service account's token just created: shown by the next GET of the team page, then dropped.
NEW_TOKEN_KEY = "models_store.new_service_token"


@login_required
@endpoint(GET="teams.list")
def team_list(request):
    """The teams the user belongs to (an operator: every team), with their role."""
    levels = permissions.team_levels(request.user)
    operator = permissions.is_operator(request.user)
    teams = selectors.teams_allowing(request.user, "teams.list")  # an operator: every team
    rows = [{"team": team, "role": levels.get(team.pk, permissions.Level.NONE).name.lower()} for team in teams]
    return render(request, "models_store/teams.html", {"rows": rows, "operator": operator})


def _http(exc: Refused):
    if isinstance(exc, AccessDenied):
        return PermissionDenied(str(exc))
    if isinstance(exc, NotFound):
        return Http404(str(exc))
    return None


def _team_page(request, team_name: str, *, status: int = 200, error: str = "", forms: dict | None = None):
    try:
        team = actions.team_for(request.user, None, team_name, "team.view")
    except Refused as exc:
        raise _http(exc) from None
    user = request.user
    may = {name: permissions.allows(user, action, team.pk) for name, action in (
        ("manage_members", "member.manage"),
        ("see_accounts", "service_account.view"),
        ("manage_accounts", "service_account.manage"),
    )}  # fmt: skip
    created = None
    new = request.session.pop(NEW_TOKEN_KEY, None) if request.method == "GET" else None
    if new and new.get("team") == team.name:
        created = new
    forms = forms or {}
    context = {
        "team": team,
        "members": actions.members(user, None, team.name),
        "accounts": [
            {"account": account, "tokens": service_accounts.tokens_of(account)}
            for account in service_accounts.service_accounts_of(team)
        ]
        if may["see_accounts"]
        else [],
        "may": may,
        "your_role": permissions.level(user, team.pk).name.lower(),
        "member_form": forms.get("member") or MemberForm(),
        "account_form": forms.get("account") or ServiceAccountForm(),
        "token_form": forms.get("token") or ServiceAccountTokenForm(),
        "created": created,
        "error": error,
    }
    response = render(request, "models_store/team_detail.html", context, status=status)
    response["Cache-Control"] = "no-store"
    return response


@login_required
@endpoint(GET="team.view")
def team_detail(request, team: str):
    return _team_page(request, team)


def _run(request, team: str, change, success: str, forms: dict | None = None):
    """Run ``change()``; on success flash ``success`` and go back to the team's
    page; a refusal: 403/404 as such, else the page with the message."""
    try:
        change()
    except Refused as exc:
        http = _http(exc)
        if http is not None:
            raise http from None
        return _team_page(request, team, status=http_status(exc) or 400, error=str(exc), forms=forms)
    messages.success(request, success)
    return redirect("team-detail", team=team)


def _invalid(form) -> str:
    return "; ".join(f"{field}: {' '.join(errors)}" for field, errors in form.errors.items())


@login_required
@require_POST
@endpoint(POST="member.manage")
def member_set(request, team: str):
    """Add a user to the team with a role, or change a member's role."""
    form = MemberForm(request.POST)
    if not form.is_valid():
        return _refuse_or_page(request, team, "member.manage", form, "member")
    data = form.cleaned_data
    return _run(
        request, team, lambda: actions.member_set(request.user, None, team, data["username"], data["role"]),
        f"{data['username']} is {data['role']} of team {team}.", {"member": form},
    )  # fmt: skip


@login_required
@require_POST
@endpoint(POST="member.manage")
def member_remove(request, team: str, username: str):
    return _run(
        request, team, lambda: actions.member_remove(request.user, None, team, username),
        f"Removed {username} from team {team}.",
    )  # fmt: skip


@login_required
@require_POST
@endpoint(POST="service_account.manage")
def account_create(request, team: str):
    form = ServiceAccountForm(request.POST)
    if not form.is_valid():
        return _refuse_or_page(request, team, "service_account.manage", form, "account")
    data = form.cleaned_data
    return _run(
        request, team,
        lambda: actions.service_account_create(request.user, None, team, data["name"], data["description"]),
        f"Created service account {data['name']}.", {"account": form},
    )  # fmt: skip


@login_required
@require_POST
@endpoint(POST="service_account.manage")
def account_deactivate(request, team: str, account: int):
    return _run(
        request, team, lambda: actions.service_account_deactivate(request.user, None, team, account),
        "Deactivated the service account: its tokens are refused.",
    )  # fmt: skip


@login_required
@require_POST
@endpoint(POST="service_account.manage")
def account_token_create(request, team: str, account: int):
    """A new token of the service account; the plaintext waits in the session
    for the next GET of the team's page (post/redirect/get)."""
    form = ServiceAccountTokenForm(request.POST)
    if not form.is_valid():
        return _refuse_or_page(request, team, "service_account.manage", form, "token")
    data = form.cleaned_data

    def create():
        row, plain = actions.service_account_token_create(
            request.user, None, team, account, data["name"], data["role"], parse_lifetime(data["expires_in"])
        )
        request.session[NEW_TOKEN_KEY] = {"team": team, "account": account, "name": row.name, "plain": plain}

    return _run(request, team, create, f"Created token {data['name']}: copy it now.", {"token": form})


@login_required
@require_POST
@endpoint(POST="service_account.manage")
def account_token_revoke(request, team: str, account: int, token_id: int):
    return _run(
        request, team, lambda: actions.service_account_token_revoke(request.user, None, team, account, token_id),
        "Revoked the token.",
    )  # fmt: skip


def _refuse_or_page(request, team: str, action: str, form, key: str):
    """An invalid form: 403/404 if the user may not do ``action`` at all, else the page with its errors (400)."""
    try:
        actions.team_for(request.user, None, team, action)
    except Refused as exc:
        raise _http(exc) from None
    return _team_page(request, team, status=400, error=_invalid(form), forms={key: form})
