"""The changes page (namespace ``changes``)."""

from django.urls import path

from ettweb.changes import views

app_name = "changes"

urlpatterns = [
    path("", views.change_list, name="list"),
]
