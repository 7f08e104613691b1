"""The API's error shape: `{"detail": ..., "errors": {field: [messages]}}`."""

from __future__ import annotations

import logging

from django.core.exceptions import PermissionDenied
from django.http import Http404
from rest_framework import exceptions, status
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
