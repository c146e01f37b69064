"""The model store's refusals: one table, each error with its HTTP status.

Services, selectors and actions raise them with a sentence for the user; the
management API answers ``{"error": <the sentence>}`` with ``status``
(:func:`http_status`, ``models_store/web/api.py``), the web UI re-renders the
page with the sentence and the status, the commands print it.

- :class:`RegistryError` (400): a malformed write (a name, a weight, a policy);
- :class:`UploadRefused` (400, 413 for its size): an upload that cannot become a version;
- :class:`AccessDenied` (403): not the caller's team's model (or team);
- :class:`NotFound` (404): no such model, version, label, team, webhook or delivery;
- :class:`Conflict` (409): refused by the registry's current state; among them
  :class:`DuplicateVersion` (the model has these bytes) and
  :class:`SignatureConflict` (a route would serve a version that breaks its callers).
"""

from __future__ import annotations


class Refused(Exception):
    """A request the model store refuses; the message says why, ``status`` is its HTTP status."""

    status = 400


class RegistryError(Refused, ValueError):
    """A registry write was refused; the message says why (HTTP 400)."""


class Conflict(RegistryError):
    """A well-formed write that the registry's current state refuses (HTTP
    409): a version policy that would serve nothing, a version label on a
    missing or not-READY version, retiring a version that is not READY or
    that a label points at, restoring one that is not retired, a taken name."""

    status = 409


class DuplicateVersion(Conflict):
    """The model already has a version with these bytes (HTTP 409)."""


class SignatureConflict(Conflict):
    """A change that would make a route serve a version whose signature
    breaks the route's callers (HTTP 409; :mod:`models_store.registry.signature_guard`):
    ``differences`` lists them, one sentence each; the message tells an
    API caller how to force it, :meth:`on_a_page` a person in the web UI."""

    def __init__(self, what: str, differences: list[str]):
        self.what = what
        self.differences = differences
        super().__init__(self._text('To do it anyway, send "force": true (audited as forced).'))

    def _text(self, hint: str) -> str:
        return f"{self.what} would break its callers: {'; '.join(self.differences)}. {hint}"

    def on_a_page(self) -> str:
        """The message for the web UI, which has a checkbox where the API has ``force``."""
        return self._text('To do it anyway, tick "even if it breaks callers" and submit again (audited as forced).')


class NotFound(Refused, LookupError):
    """No such model, model version, version label, team, webhook or delivery (HTTP 404)."""

    status = 404

    def __str__(self) -> str:
        return self.args[0] if self.args else "not found"


class AccessDenied(Refused, PermissionError):
    """The user (or token) may not make this change; the message says why (HTTP 403)."""

    status = 403


class UploadRefused(Refused, ValueError):
    """The uploaded file cannot become a model version; the message says why.
    ``status`` is the HTTP status to answer (400, or 413 for size)."""

    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.status = status


def http_status(exc: BaseException) -> int | None:
    """The HTTP status of a refusal, or None for another exception."""
    return exc.status if isinstance(exc, Refused) else None
