"""The web UI's API token pages (``/tokens/``): a user's tokens, a form to
create one (shown once, after the redirect), and revoking one."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from models_store.accounts import selectors, services
from models_store.accounts.forms import TokenForm
from models_store.accounts.permissions import endpoint
from models_store.accounts.tokens import parse_lifetime
from models_store.errors import NotFound, RegistryError

#: Session key of a token just created: shown by the next GET of the page, then dropped.
NEW_TOKEN_KEY = "models_store.new_token"


@login_required
@endpoint(GET="token.own", POST="token.own")
def token_list(request):
    """GET: the user's tokens, and a token created just before (shown on that
    one answer only; the token itself is not stored). POST: create one, then
    redirect to GET (post/redirect/get: reloading the page never creates a
    second token); the plaintext waits in the session until that GET."""
    teams = list(selectors.teams_allowing(request.user, "model.call").values_list("name", flat=True))
    form = TokenForm(request.POST or None, teams=teams)
    created = None
    status = 200
    if request.method == "POST":
        if form.is_valid():
            team = selectors.team_get(form.cleaned_data["team"]) if form.cleaned_data["team"] else None
            lifetime = form.cleaned_data["expires_in"]
            try:
                token, plain = services.token_create(
                    user=request.user,
                    name=form.cleaned_data["name"],
                    team=team,
                    expires_in=parse_lifetime(lifetime) if lifetime else None,
                )
            except RegistryError as exc:
                form.add_error(None, str(exc))
                status = 400
            else:
                request.session[NEW_TOKEN_KEY] = {"id": token.pk, "plain": plain}
                return redirect("token-list")
        else:
            status = 400
    else:
        new = request.session.pop(NEW_TOKEN_KEY, None)
        token = new and selectors.tokens_for_user(request.user).filter(pk=new["id"]).first()
        if token:
            created = {"token": token, "plain": new["plain"]}
    context = {
        "form": form,
        "created": created,
        "tokens": selectors.tokens_for_user(request.user),
    }
    response = render(request, "models_store/tokens.html", context, status=status)
    response["Cache-Control"] = "no-store"
    return response


@login_required
@require_POST
@endpoint(POST="token.own")
def token_revoke(request, token_id: int):
    """Revoke one of the user's own API tokens (a superuser: anyone's)."""
    try:
        token = selectors.token_of(request.user, token_id)
    except NotFound as exc:
        raise Http404(str(exc)) from None
    services.token_revoke(token=token, actor=request.user)
    messages.success(request, f"Revoked the API token {token.name} ({token.prefix}…).")
    return redirect("token-list")
