"""Log-in throttling, for every path that checks a password: django-axes.

Axes counts failures in its backend and its `user_login_failed` handler, so the
log-in page, the admin's log-in and the API's token endpoint (all three call
`authenticate(request, ...)`) share one counter and one lockout, and so will any
log-in added later. A locked name is refused before its password is checked.

The counters are rows (axes' database handler), not cache keys: log-in keeps
working, throttled, while Redis is down (tests/chaos/test_redis_outage.py).
"""

from __future__ import annotations

from datetime import timedelta

from axes.backends import AxesStandaloneBackend
from django.conf import settings
from django.contrib.auth.forms import AuthenticationForm
from django.core import exceptions as django_exceptions
from django.http import JsonResponse
from django.shortcuts import render
from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.authtoken.serializers import AuthTokenSerializer
from rest_framework.authtoken.views import ObtainAuthToken
from rest_framework.exceptions import ValidationError
from rest_framework.response import Response

from portal.api_schema import ErrorSerializer

LOGIN_TOKEN_NAME = "API log-in"


def client_ip(request) -> str:
    # daphne's --proxy-headers puts the load balancer's X-Forwarded-For here;
    # reading the header ourselves would let any client pick its own address.
    return request.META.get("REMOTE_ADDR", "")


def username_key(request, credentials) -> str:
    """One counter for `alice`, ` Alice` and `ALICE`."""
    name = (credentials or {}).get("username") or request.POST.get("username", "")
    return str(name).strip().lower()[:150]


def lockout_message() -> str:
    minutes = max(1, round(settings.MEDBAY_LOGIN_WINDOW_S / 60))
    return (
        f"Too many failed log-in attempts for this user name from your address. "
        f"Try again in {minutes} minute{'s' if minutes != 1 else ''}."
    )


def lockout(request, *args, **kwargs):
    """Axes' lockout answer: JSON under /api/, the error page elsewhere, with Retry-After.

    Axes calls this with (request, response, credentials) or, from its async
    middleware, (request, credentials); neither is needed here.
    """
    if request.path.startswith("/api/"):
        response = JsonResponse({"detail": lockout_message(), "errors": {}}, status=429)
    else:
        context = {"status": 429, "message": lockout_message()}
        response = render(request, "error.html", context, status=429)
    response["Retry-After"] = str(settings.MEDBAY_LOGIN_WINDOW_S)
    return response


def cool_off(request=None):
    """How long a lock lasts; read per request so tests (and admins) may change it."""
    return timedelta(seconds=settings.MEDBAY_LOGIN_WINDOW_S)


class ThrottledObtainAuthToken(ObtainAuthToken):
    """DRF's token endpoint; axes marks DRF's Request, not Django's, as locked out."""

    @extend_schema(
        request=AuthTokenSerializer,
        responses={
            200: inline_serializer("IssuedToken", {"token": serializers.CharField()}),
            429: ErrorSerializer,
        },
    )
    def post(self, request, *args, **kwargs):
        try:
            response = self._issue(request)
        except ValidationError:
            if getattr(request, "axes_locked_out", False):
                return lockout(request)
            raise
        if getattr(request, "axes_locked_out", False):
            return lockout(request)
        return response

    def _issue(self, request):
        """A new token on every log-in, stored hashed (DRF's would be one, in the clear)."""
        from identity.accounts import issue_api_token

        serializer = self.get_serializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        _, raw = issue_api_token(serializer.validated_data["user"], LOGIN_TOKEN_NAME)
        return Response({"token": raw})


class ThrottlingBackend(AxesStandaloneBackend):
    """Axes' backend, which also lets through an authenticate() without a request.

    Every web path passes its request (Django's log-in form, the admin's, DRF's
    token serializer); only code on this host calls without one (the test
    client's login(), management commands), and there is no address to count.
    """

    def authenticate(self, request, username=None, password=None, **kwargs):
        if request is None:
            return None
        return super().authenticate(request, username, password, **kwargs)


class LoginForm(AuthenticationForm):
    """Django's log-in form, which says why when a backend knows why it refused.

    A backend that knows (the site directory is down, the account is disabled
    there: identity/ldap_login.py) leaves `request.medbay_login_problem`; anything
    else reads as a wrong name or password.
    """

    error_messages = {
        **AuthenticationForm.error_messages,
        "invalid_login": "Your user name and password didn't match. Please try again.",
    }

    def clean(self):
        try:
            return super().clean()
        except django_exceptions.ValidationError:
            problem = getattr(self.request, "medbay_login_problem", None)
            if problem:
                raise django_exceptions.ValidationError(problem, code="login_problem") from None
            raise
