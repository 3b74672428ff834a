from __future__ import annotations

from django.contrib import admin
from django.urls import include, path
from djapp import views

# The admin's index links to the dashboard.
admin.site.index_template = "jobq/admin_index.html"

urlpatterns = [
    path("notes/", views.add_note),
    # Before the admin's own URLs: it answers every URL below admin/.
    path("admin/jobq/", include("jobq.contrib.django.urls")),
    path("admin/", admin.site.urls),
]
