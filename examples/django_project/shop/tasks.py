"""The shop's jobs; jobq.contrib.django imports every app's ``tasks`` module."""

from __future__ import annotations

import logging

from jobq.contrib.django import task
from shop.models import Order

logger = logging.getLogger(__name__)


@task(max_attempts=3)
def send_receipt(order_id: int) -> str:
    """Send the receipt of an order (here: log it) and remember it was sent.

    Runs after the order's transaction committed, so the order is there.
    """
    order = Order.objects.get(pk=order_id)
    if not order.receipt_sent:
        logger.info("receipt for order %d to %s", order.pk, order.email)
        order.receipt_sent = True
        order.save(update_fields=["receipt_sent"])
    return f"receipt sent to {order.email}"
