"""The dashboard's URLs: ``path("admin/jobq/",
include("jobq.contrib.django.urls"))``, before ``path("admin/",
admin.site.urls)`` (see ``jobq.contrib.django.dashboard``)."""

from __future__ import annotations

from django.urls import path

from .dashboard import dashboard

app_name = "jobq"
urlpatterns = [
    path("", dashboard, name="dashboard"),
    path("<path:path>", dashboard, name="dashboard-path"),
]
