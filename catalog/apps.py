from django.apps import AppConfig


class CatalogConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "catalog"
    verbose_name = "Self-service catalog"

    def ready(self) -> None:
        from catalog import tasks  # noqa: F401  (registers the job tasks)
