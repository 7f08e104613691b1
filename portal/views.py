"""Error pages: JSON under /api/, a plain page elsewhere, never a traceback."""

from __future__ import annotations

from django.http import HttpResponse, JsonResponse
from django.shortcuts import render
from django.template.loader import render_to_string


def _error(request, status: int, message: str):
    if request.path.startswith("/api/"):
        return JsonResponse({"detail": message, "errors": {}}, status=status)
    return render(request, "error.html", {"status": status, "message": message}, status=status)


def bad_request(request, exception=None):
    return _error(request, 400, "Bad request.")


def permission_denied(request, exception=None):
    return _error(request, 403, "You do not have permission to see this page.")


def page_not_found(request, exception=None):
    return _error(request, 404, "Not found.")


def server_error(request):
    """Touches neither the database nor the session: it may be why we are here."""
    message = "Something went wrong on our side; it has been logged."
    if request.path.startswith("/api/"):
        return JsonResponse({"detail": message, "errors": {}}, status=500)
    page = render_to_string("error_bare.html", {"status": 500, "message": message})
    return HttpResponse(page, status=500)
