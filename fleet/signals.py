"""What the fleet app tells the apps above it, which it may not import (DESIGN.md boundaries).

``status_changed`` is sent after the watcher or a Flux event wrote status rows (and merged
changes moved on): the catalog connects its request advancement to it (catalog/apps.py), as
its schedule runs it after the sync.

``remediation_notice`` is sent when the remediation loop (``fleet.remediation``) cordoned,
returned or paused: ``title``, ``body``, ``admin_url``, ``tenants`` (slugs whose workloads ran
on ``node``, by namespace). The catalog tells the platform admins and those tenants (inbox,
mail, outbound webhook).
"""

from __future__ import annotations

from django.dispatch import Signal

status_changed = Signal()
remediation_notice = Signal()
