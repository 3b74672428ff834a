"""The dashboard included after the admin's URLs: the admin's catch-all
answers its pages (a 404 for staff), and ``manage.py check`` says so
(``jobq.W001``)."""

from __future__ import annotations

from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    path("admin/jobq/", include("jobq.contrib.django.urls")),
]
