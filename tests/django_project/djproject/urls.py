from __future__ import annotations

from django.urls import path
from djapp import views

urlpatterns = [path("notes/", views.add_note)]
