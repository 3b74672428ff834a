from __future__ import annotations

from django.urls import include, path
from djapp import views

urlpatterns = [
    path("notes/", views.add_note),
    path("admin/jobq/", include("jobq.contrib.django.urls")),
]
