from django.apps import AppConfig


class ModelsStoreConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "models_store"
    verbose_name = "Model store"

    def ready(self) -> None:
        from models_store import signals  # here: it imports models, loadable only once apps are ready

        signals.connect()
