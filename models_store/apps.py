from django.apps import AppConfig


class ModelsStoreConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "models_store"
    verbose_name = "Model store"

    def ready(self) -> None:
        from models_store.accounts import signals

        signals.connect()
