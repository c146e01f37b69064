"""Single sign-on with OpenID Connect (docs/sso.md): the provider's
discovery, the sign-in backend and views (mozilla-django-oidc), teams and
roles from the groups claim, and the provider's access tokens on the
management API."""
