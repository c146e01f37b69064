"""``manage.py delete_version MODEL VERSION``: remove a version and its artifact."""

from django.core.management.base import BaseCommand, CommandError

from models_store.errors import RegistryError
from models_store.registry import selectors
from models_store.registry.services import versions


class Command(BaseCommand):
    help = "Delete a model version (its number is never reused)."

    def add_arguments(self, parser):
        parser.add_argument("model")
        parser.add_argument("version", type=int)
        parser.add_argument(
            "--force", action="store_true",
            help="even if the default route would then serve a version that breaks its callers (audited as forced)",
        )  # fmt: skip

    def handle(self, *args, model, version, force=False, **options):
        registered = selectors.model_get(model)
        row = selectors.version_get(registered, version) if registered else None
        if row is None:
            raise CommandError(f"no version {version} of model '{model}'")
        try:
            versions.version_delete(version=row, force=force)
        except RegistryError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(f"deleted {model} version {version}")
