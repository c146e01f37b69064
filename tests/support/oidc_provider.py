"""A real OpenID Connect provider for the single sign-on tests: the
``oidc-provider-mock`` package (authlib's authorization server in Flask), in
its own process on 127.0.0.1, that demands PKCE.

oidc-provider-mock (0.3) runs the authorization code flow, signs ID tokens
with its RS256 key (published as its JWKS), serves discovery, userinfo and an
end-session page, and lets a test set a user's claims (``PUT /users/<sub>``,
e.g. ``{"preferred_username": "ana", "groups": ["ml-devs"]}``), which it puts
in the ID token and the userinfo answer. It ignores PKCE; this module
registers authlib's own ``CodeChallenge`` extension on its authorization code
grant, made to refuse an authorization request without an S256
``code_challenge`` and a token request whose ``code_verifier`` does not
match, so a client that skipped PKCE could not sign in.

Its signing key is given the key id (``kid``) real providers publish.
``python -m tests.support.oidc_provider PORT`` runs it; :class:`Provider`
starts and stops that process.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request

from tests.support.server import ROOT, free_port, http_ok

KEY_ID = "test-signing-key"


def _app():
    """oidc-provider-mock's Flask app, with nonces required and PKCE (S256) demanded."""
    import flask
    import oidc_provider_mock
    from authlib.oauth2.rfc6749 import InvalidRequestError
    from authlib.oauth2.rfc7636 import CodeChallenge
    from oidc_provider_mock import _app as mock

    challenges: dict[str, tuple[str, str]] = {}  # authorization code -> (code_challenge, method)

    class Grant(mock.AuthorizationCodeGrant):
        def save_authorization_code(self, code, request):
            data = request.payload.data
            challenges[code] = (data.get("code_challenge"), data.get("code_challenge_method"))
            return super().save_authorization_code(code, request)

    class DemandedChallenge(CodeChallenge):
        def validate_code_challenge(self, grant, redirect_uri):
            data = grant.request.payload.data
            if not data.get("code_challenge") or data.get("code_challenge_method") != "S256":
                raise InvalidRequestError("this provider demands PKCE: code_challenge with code_challenge_method S256")
            return super().validate_code_challenge(grant, redirect_uri)

        def get_authorization_code_challenge(self, authorization_code):
            return challenges.get(authorization_code.code, (None, None))[0]

        def get_authorization_code_challenge_method(self, authorization_code):
            return challenges.get(authorization_code.code, (None, None))[1]

    app = oidc_provider_mock.app(require_nonce=True, access_token_max_age=mock.timedelta(minutes=10))
    with app.test_request_context():
        app.preprocess_request()
        server = flask.g._authlib_authorization_server
        # Its signing key gets the key id every real provider publishes (PyJWT's
        # PyJWKClient and mozilla-django-oidc pick the key by it), its use and algorithm.
        flask.g.oidc_provider_mock_storage.jwk.options.update(kid=KEY_ID, use="sig", alg="RS256")
    for grants in (server._authorization_grants, server._token_grants):
        for index, (grant_class, extensions) in enumerate(grants):
            if grant_class is mock.AuthorizationCodeGrant:
                if not any(isinstance(e, DemandedChallenge) for e in extensions):
                    extensions.append(DemandedChallenge(required=True))
                    for extension in extensions:
                        if isinstance(extension, mock.OpenIDCode):
                            _sign_with_key_id(extension)
                grants[index] = (Grant, extensions)
    return app


def _sign_with_key_id(extension) -> None:
    """The ID tokens the extension signs name their key (the ``kid`` header)."""
    config = extension.get_jwt_config
    extension.get_jwt_config = lambda grant, client=None: {**config(grant, client), "kid": KEY_ID}


class Provider:
    """The provider in its own process on a free port of 127.0.0.1."""

    def __init__(self):
        self.port = free_port()
        self.issuer = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen | None = None

    def start(self, timeout: float = 30) -> Provider:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.support.oidc_provider", str(self.port)],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the OIDC provider exited: {self.process.stdout.read().decode()}")
            if http_ok(f"{self.issuer}/.well-known/openid-configuration"):
                return self
            time.sleep(0.1)
        self.stop()
        raise RuntimeError("the OIDC provider did not start")

    def set_user(self, sub: str, claims: dict) -> None:
        """The claims ``sub`` gets from now on (its next sign-in)."""
        request = urllib.request.Request(
            f"{self.issuer}/users/{sub}", data=json.dumps(claims).encode(), method="PUT",
            headers={"Content-Type": "application/json"},
        )  # fmt: skip
        with urllib.request.urlopen(request, timeout=10) as answer:
            assert answer.status == 204

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def main() -> None:
    from werkzeug.serving import run_simple

    run_simple("127.0.0.1", int(sys.argv[1]), _app(), threaded=True)


if __name__ == "__main__":
    main()
