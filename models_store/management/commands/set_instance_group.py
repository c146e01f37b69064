"""``manage.py set_instance_group MODEL --kind GPU --gpus 0,1``: where a model runs
in worker mode (Triton's instance group)."""

from django.core.management.base import BaseCommand, CommandError

from models_store.errors import RegistryError
from models_store.registry import selectors
from models_store.registry.services import models as model_services


class Command(BaseCommand):
    help = "Set a model's instance group: --kind AUTO|GPU|CPU, --gpus 0,1 (GPU only), --count N."

    def add_arguments(self, parser):
        parser.add_argument("model")
        parser.add_argument("--kind", choices=["AUTO", "GPU", "CPU"], default="AUTO")
        parser.add_argument("--gpus", default="", help="comma-separated GPU numbers, e.g. 0,1")
        parser.add_argument("--count", type=int, default=1)

    def handle(self, *args, model, kind, gpus, count, **options):
        registered = selectors.model_get(model)
        if registered is None:
            raise CommandError(f"unknown model '{model}'")
        try:
            numbers = [int(g) for g in gpus.split(",") if g.strip()]
            groups = [{"kind": f"KIND_{kind}", "count": count, "gpus": numbers}]
            model_services.model_set_instance_group(model=registered, groups=groups)
        except (ValueError, RegistryError) as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(f"{model}: instance group KIND_{kind} gpus={numbers} count={count}")
