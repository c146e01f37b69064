"""``manage.py import_repository DIR``: import a Triton-style model repository."""

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from models_store.errors import RegistryError
from models_store.intake.repository import import_repository


class Command(BaseCommand):
    help = "Import DIR/<model>/<version>/model.onnx (with optional config.pbtxt) into the registry."

    def add_arguments(self, parser):
        parser.add_argument("directory", type=Path)
        parser.add_argument(
            "--team",
            default=None,
            help="team given to imported models that have none (default: the REPOSITORY_TEAM setting; "
            "empty: operator-owned)",
        )

    def handle(self, *args, directory: Path, team: str | None, **options):
        try:
            results = import_repository(directory, team)
        except (FileNotFoundError, RegistryError) as exc:
            raise CommandError(str(exc)) from None
        for result in results:
            style = self.style.ERROR if result.outcome == "failed" else self.style.SUCCESS
            self.stdout.write(style(str(result)))
        versions = [r for r in results if r.directory]
        failed = sum(r.outcome == "failed" for r in versions)
        configs = sum(r.outcome == "failed" for r in results if not r.directory)
        refused = f"; {configs} model config(s) refused" if configs else ""
        self.stdout.write(f"{len(versions)} version directories, {failed} failed{refused}")
