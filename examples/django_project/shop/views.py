from __future__ import annotations

from django.http import HttpRequest, HttpResponse, JsonResponse

from shop.models import Order
from shop.tasks import send_receipt


def create_order(request: HttpRequest) -> HttpResponse:
    """``/orders/?email=...&total=...``: ATOMIC_REQUESTS wraps this view in a
    transaction, so the job is written when it commits."""
    order = Order.objects.create(
        email=request.GET.get("email", "ann@example.com"),
        total_cents=int(request.GET.get("total", "1999")),
    )
    send_receipt.enqueue(order.pk)
    return JsonResponse({"order": order.pk})
