"""Platform-admin catalog URLs (approvals, job templates) and everyone's notifications.

The ``approvals/`` and ``job-templates/`` pages answer 404 to anyone but a platform admin;
``notifications/`` shows the signed-in user's own rows only."""

from __future__ import annotations

from django.urls import path

from catalog import views_admin as views

app_name = "approvals"

urlpatterns = [
    path("approvals/", views.queue, name="queue"),
    path("approvals/approve-selected/", views.approve_many, name="approve_many"),
    path("approvals/<int:request_id>/", views.detail, name="detail"),
    path("approvals/<int:request_id>/approve/", views.approve, name="approve"),
    path("approvals/<int:request_id>/reject/", views.reject, name="reject"),
    path(
        "approvals/<int:request_id>/request-changes/",
        views.request_changes,
        name="request_changes",
    ),
    path("approvals/<int:request_id>/retry/", views.retry, name="retry"),
    path("job-templates/", views.job_templates, name="job_templates"),
    path("job-templates/<slug:name>/", views.job_template, name="job_template"),
    path(
        "job-templates/<slug:name>/delete/",
        views.job_template_delete,
        name="job_template_delete",
    ),
    path("notifications/", views.notifications, name="notifications"),
    path("notifications/read/", views.notifications_read, name="notifications_read"),
]
