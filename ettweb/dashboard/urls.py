"""Dashboard URLs (namespace ``dashboard``)."""

from django.urls import path

from ettweb.dashboard import views

app_name = "dashboard"

urlpatterns = [
    path("", views.jobs, name="jobs"),
    path("fleet/", views.fleet, name="fleet"),
    path("collectors/", views.collectors, name="collectors"),
    path("jobs/<path:job>/", views.job_detail, name="job"),
]
