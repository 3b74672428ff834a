"""``python manage.py demo``: migrate, take two orders (one rolled back),
run the jobs, and show what happened."""

from __future__ import annotations

from typing import Any

from django.core.management import call_command
from django.core.management.base import BaseCommand
from django.db import transaction

from jobq.contrib.django import get_queue
from shop.models import Order
from shop.tasks import send_receipt


class Command(BaseCommand):
    help = "Run the jobq example end to end."

    def handle(self, *args: Any, **options: Any) -> None:
        call_command("migrate", verbosity=0)
        queue = get_queue()
        with transaction.atomic():
            order = Order.objects.create(email="ann@example.com", total_cents=1999)
            send_receipt.enqueue(order.pk)  # written to the store at commit
        try:
            with transaction.atomic():
                lost = Order.objects.create(email="bob@example.com", total_cents=5)
                send_receipt.enqueue(lost.pk)  # never written: rolled back
                raise RuntimeError("payment declined")
        except RuntimeError:
            pass
        ran = queue.run_pending()  # or: manage.py jobq_worker in another shell
        order.refresh_from_db()
        self.stdout.write(f"jobs run: {ran}")
        self.stdout.write(f"order {order.pk} receipt sent: {order.receipt_sent}")
        call_command("jobq", "stats", stdout=self.stdout)
