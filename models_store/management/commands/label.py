"""``manage.py label MODEL LABEL VERSION`` (or ``--delete``): version labels."""

from django.core.management.base import BaseCommand, CommandError

from models_store.errors import RegistryError
from models_store.registry import selectors
from models_store.registry.services import routes


class Command(BaseCommand):
    help = "Point a version label (e.g. stable, canary) at a READY version, or delete it."

    def add_arguments(self, parser):
        parser.add_argument("model")
        parser.add_argument("label")
        parser.add_argument("version", type=int, nargs="?")
        parser.add_argument("--delete", action="store_true")
        parser.add_argument(
            "--force", action="store_true", help="move it even though its callers' signature breaks (audited)"
        )

    def handle(self, *args, model, label, version, delete, force, **options):
        registered = selectors.model_get(model)
        if registered is None:
            raise CommandError(f"unknown model '{model}'")
        if delete:
            try:
                deleted = routes.label_delete(model=registered, name=label)
            except RegistryError as exc:
                raise CommandError(str(exc)) from None
            if not deleted:
                raise CommandError(f"model '{model}' has no label '{label}'")
            self.stdout.write(f"deleted label {label} of {model}")
            return
        if version is None:
            raise CommandError("give the VERSION the label points at, or --delete")
        try:
            routes.label_set(model=registered, name=label, number=version, force=force)
        except RegistryError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(f"{model}@{label} -> version {version}")
