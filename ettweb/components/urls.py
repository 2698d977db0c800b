"""Component pages (namespace ``components``)."""

from django.urls import path

from ettweb.components import views

app_name = "components"

urlpatterns = [
    path("", views.index, name="index"),
    # Before ``detail``, whose ``path`` converter would take ``<name>/phases`` as a name.
    path("<path:name>/phases/", views.phases, name="phases"),
    # ``path``: a component name is free text; one with a slash must still resolve, not 500.
    path("<path:name>/", views.detail, name="detail"),
]
