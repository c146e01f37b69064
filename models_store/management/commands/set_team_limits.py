"""``manage.py set_team_limits TEAM --rate 50 --burst 100 --in-flight 8``: a
team's own inference limits (operators; audited). A limit left out, or given
as ``default``, follows RATE_LIMIT_TEAM_*; 0 means unlimited."""

from django.core.management.base import BaseCommand, CommandError

from models_store.accounts import selectors, services
from models_store.errors import RegistryError


def _value(text: str | None, kind):
    if text is None or text == "default":
        return None
    try:
        return kind(text)
    except ValueError:
        raise CommandError(f"not a number: {text!r}") from None


class Command(BaseCommand):
    help = "Set a team's inference limits: --rate (requests/s), --burst, --in-flight ('default': the default)."

    def add_arguments(self, parser):
        parser.add_argument("team")
        parser.add_argument("--rate", help="requests per second of the whole team (0: unlimited)")
        parser.add_argument("--burst", help="requests the team may send at once above its rate")
        parser.add_argument("--in-flight", dest="in_flight", help="inferences of the team at once (0: unlimited)")

    def handle(self, *args, team, rate, burst, in_flight, **options):
        found = selectors.team_get(team)
        if found is None:
            raise CommandError(f"unknown team '{team}'")
        try:
            found = services.team_set_limits(
                team=found, rate=_value(rate, float), burst=_value(burst, int), in_flight=_value(in_flight, int)
            )
        except RegistryError as exc:
            raise CommandError(str(exc)) from None

        def shown(value):
            return "default" if value is None else f"{value:g}"

        self.stdout.write(
            f"team {team}: rate {shown(found.rate_limit_rps)}/s, burst {shown(found.rate_limit_burst)}, "
            f"in flight {shown(found.max_in_flight)}"
        )
