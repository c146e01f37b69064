"""``manage.py create_user USERNAME --team T [--role viewer|maintainer|owner]``: an account for the web UI.

The password comes from an environment variable (``--password-from-env``,
default variable MODELHOST_PASSWORD) or is generated and printed once; it
is never a fixed default. Teams are created when missing. Migrates first,
so that it works on a fresh machine before ``make run``.
"""

from __future__ import annotations

import os
import secrets

from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError

from models_store.accounts import services as accounts
from models_store.errors import RegistryError

DEFAULT_ENV = "MODELHOST_PASSWORD"


class Command(BaseCommand):
    help = "Create a user of the web UI and management API, member of the given teams."

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument("--team", action="append", default=[], help="team to join (repeatable; created if missing)")
        parser.add_argument(
            "--role",
            default="owner",
            choices=["viewer", "maintainer", "owner"],
            help="role in those teams (default owner)",
        )
        parser.add_argument("--email", default="")
        parser.add_argument("--superuser", action="store_true", help="an operator: changes every model, admin access")
        parser.add_argument(
            "--password-from-env",
            nargs="?",
            const=DEFAULT_ENV,
            metavar="VAR",
            help=f"read the password from environment variable VAR (default {DEFAULT_ENV}) instead of generating one",
        )

    def handle(self, *args, username, team, role, email, superuser, password_from_env, **options):
        call_command("migrate", interactive=False, verbosity=0)
        generated = password_from_env is None
        if generated:
            password = secrets.token_urlsafe(12)
        else:
            password = os.environ.get(password_from_env, "")
            if not password:
                raise CommandError(f"environment variable {password_from_env} is empty or not set")
            try:
                validate_password(password)
            except ValidationError as exc:
                raise CommandError("password refused: " + " ".join(exc.messages)) from None
        try:
            accounts.user_create(
                username=username, password=password, teams=team, email=email, superuser=superuser, role=role
            )
        except RegistryError as exc:
            raise CommandError(str(exc)) from None
        kind = "superuser" if superuser else "user"
        teams = f" in team(s) {', '.join(team)}" if team else " (in no team: add one to let them upload)"
        self.stdout.write(f"created {kind} {username}{teams}")
        if generated:
            self.stdout.write(f"password: {password}")
