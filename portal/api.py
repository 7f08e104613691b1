"""The API's error shape: `{"detail": ..., "errors": {field: [messages]}}`."""

from __future__ import annotations

import logging

from django.conf import settings
from django.core.exceptions import PermissionDenied, RequestDataTooBig
from django.http import Http404
from rest_framework import exceptions, status
from rest_framework.pagination import LimitOffsetPagination
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

logger = logging.getLogger(__name__)


def _field_errors(data) -> dict[str, list[str]]:
    if isinstance(data, dict):
        return {
            str(field): [str(m) for m in (msgs if isinstance(msgs, list) else [msgs])]
            for field, msgs in data.items()
            if field != "detail"
        }
    if isinstance(data, list):
        return {"non_field_errors": [str(m) for m in data]}
    return {}


def exception_handler(exc, context):
    if isinstance(exc, Http404):
        exc = exceptions.NotFound()
    elif isinstance(exc, PermissionDenied):
        exc = exceptions.PermissionDenied()
    elif isinstance(exc, RequestDataTooBig):
        from core.inputs import PayloadTooLarge

        exc = PayloadTooLarge(
            f"Payload too large; at most {settings.DATA_UPLOAD_MAX_MEMORY_SIZE} bytes."
        )
    response = drf_exception_handler(exc, context)
    if response is None:
        # Unexpected: log it with the traceback, never show one to the client.
        logger.exception("Unhandled API error", exc_info=exc)
        return Response(
            {"detail": "Internal error; it has been logged.", "errors": {}},
            status=status.HTTP_500_INTERNAL_SERVER_ERROR,
        )
    if isinstance(exc, exceptions.ValidationError):
        errors = _field_errors(exc.detail)
        response.data = {"detail": "Invalid input.", "errors": errors}
    else:
        detail = response.data.get("detail") if isinstance(response.data, dict) else None
        response.data = {"detail": str(detail or exc), "errors": {}}
    return response


class BoundedPagination(LimitOffsetPagination):
    """limit/offset pages of at most MAX_LIMIT rows; an offset past MAX_OFFSET is a 400.

    Unbounded, `?limit=100000000` read the whole event table into one answer and
    `?offset=` past 2**63 overflowed PostgreSQL's bigint (a 500).
    """

    max_limit = 500
    MAX_OFFSET = 10_000_000

    def get_offset(self, request):
        raw = request.query_params.get(self.offset_query_param, "")
        if raw.strip().isdigit() and int(raw) > self.MAX_OFFSET:
            raise exceptions.ValidationError(
                {self.offset_query_param: [f"Ensure this value is at most {self.MAX_OFFSET}."]}
            )
        return super().get_offset(request)
