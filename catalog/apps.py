from django.apps import AppConfig


class CatalogConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "catalog"
    verbose_name = "Self-service catalog"

    def ready(self) -> None:
        from catalog import (
            fleet_notices,
            tasks,  # noqa: F401  (registers the job tasks)
        )
        from fleet.signals import remediation_notice, status_changed

        # Status as events: requests move on as soon as the watcher or a Flux event wrote
        # the rows readiness reads, not at the next scheduled advance.
        status_changed.connect(_advance, dispatch_uid="catalog.advance_requests")
        # The remediation loop cordoned, returned or paused: tell admins and tenants.
        remediation_notice.connect(fleet_notices.tell, dispatch_uid="catalog.remediation_notice")


def _advance(sender: object, **kwargs: object) -> None:
    from catalog.services import advance_requests

    advance_requests()
