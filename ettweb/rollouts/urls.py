"""Rollout pages (namespace ``rollouts``)."""

from django.urls import path

from ettweb.rollouts import views

app_name = "rollouts"

urlpatterns = [
    path("", views.rollout_list, name="list"),
    path("new/", views.rollout_create, name="create"),
    path("<int:rollout_id>/", views.rollout_detail, name="detail"),
    path("<int:rollout_id>/edit/", views.rollout_edit, name="edit"),
]
