"""``manage.py create_token USERNAME NAME [--team T] [--expires-in 90d]``: an API token for scripts.

Prints the token once (only its hash is stored), like the web UI's API
tokens page; handy to bootstrap automation. ``--expires-in`` takes a number
and a unit: ``d`` (days), ``h`` (hours), ``m`` (minutes) or ``s`` (seconds);
the expiry is printed on stderr.
"""

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from models_store.accounts import selectors, services
from models_store.accounts.tokens import parse_lifetime
from models_store.errors import RegistryError


class Command(BaseCommand):
    help = "Create an API token for a user and print it (shown once)."

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument("name", help="what uses the token, e.g. ci")
        parser.add_argument("--team", default="", help="limit the token to this team's models")
        parser.add_argument("--expires-in", default="", help="lifetime, e.g. 90d, 12h, 30m (default: no expiry)")

    def handle(self, *args, username, name, team, expires_in, **options):
        user = get_user_model().objects.filter(username=username).first()
        if user is None:
            raise CommandError(f"unknown user '{username}'")
        scope = None
        if team:
            scope = selectors.team_get(team)
            if scope is None:
                raise CommandError(f"unknown team '{team}'")
        try:
            lifetime = parse_lifetime(expires_in) if expires_in else None
            token, plain = services.token_create(user=user, name=name, team=scope, expires_in=lifetime)
        except (RegistryError, ValueError) as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(plain)
        if token.expires_at is not None:
            self.stderr.write(f"expires at {token.expires_at:%Y-%m-%d %H:%M:%S %Z}")
