"""Change request URLs. Each change page resolves through get_change_for_user (404 for
outsiders; tests/gitops/test_change_views.py walks them)."""

from __future__ import annotations

from django.urls import path

from gitops import views, webhooks

app_name = "gitops"

urlpatterns = [
    path("changes/", views.change_list, name="list"),
    path("changes/queue/", views.merge_queue, name="queue"),
    path("changes/<int:number>/", views.change_detail, name="detail"),
    path("changes/<int:number>/review/", views.change_review, name="review"),
    path("changes/<int:number>/merge/", views.change_merge, name="merge"),
    path("changes/<int:number>/close/", views.change_close, name="close"),
    path("gitops/webhook/", webhooks.forge_webhook, name="forge_webhook"),
    path("changes/<int:number>/update-branch/", views.change_update_branch, name="update_branch"),
    path("changes/<int:number>/enqueue/", views.change_enqueue, name="enqueue"),
    path("changes/<int:number>/dequeue/", views.change_dequeue, name="dequeue"),
]
