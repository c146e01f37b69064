"""``manage.py import_repository DIR``: import a Triton-style model repository."""

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from models_store.repository import import_repository


class Command(BaseCommand):
    help = "Import DIR/<model>/<version>/model.onnx (with optional config.pbtxt) into the registry."

    def add_arguments(self, parser):
        parser.add_argument("directory", type=Path)

    def handle(self, *args, directory: Path, **options):
        try:
            results = import_repository(directory)
        except FileNotFoundError as exc:
            raise CommandError(str(exc)) from None
        for result in results:
            style = self.style.ERROR if result.outcome == "failed" else self.style.SUCCESS
            self.stdout.write(style(str(result)))
        failed = sum(r.outcome == "failed" for r in results)
        self.stdout.write(f"{len(results)} version directories, {failed} failed")
