from django.apps import AppConfig


class HostingConfig(AppConfig):
    """The composition root: installs the model store's implementations of
    the serving side's ports when Django starts (see hosting/composition.py)."""

    name = "hosting"
    verbose_name = "Hosting"

    def ready(self) -> None:
        from hosting import composition  # here: it imports the apps' models, loadable only once apps are ready

        composition.install()
