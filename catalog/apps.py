from django.apps import AppConfig


class CatalogConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "catalog"
    verbose_name = "Self-service catalog"

    def ready(self) -> None:
        from catalog import tasks  # noqa: F401  (registers the job tasks)
        from fleet.signals import status_changed

        # Status as events: requests move on as soon as the watcher or a Flux event wrote
        # the rows readiness reads, not at the next scheduled advance.
        status_changed.connect(_advance, dispatch_uid="catalog.advance_requests")


def _advance(sender: object, **kwargs: object) -> None:
    from catalog.services import advance_requests

    advance_requests()
