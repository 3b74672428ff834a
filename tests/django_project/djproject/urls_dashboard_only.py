"""The dashboard mounted outside the admin (at jobq/), in a project whose
URLs have no admin: no admin's frame, and ``LOGIN_URL`` to log in."""

from __future__ import annotations

from django.urls import include, path

urlpatterns = [path("jobq/", include("jobq.contrib.django.urls"))]
