"""Hostile input stopped at the boundary, with a 400 that names the field.

PostgreSQL refuses NUL in text (and COPY aborts the whole batch), a lone UTF-16
surrogate cannot be encoded, a date near year 9999 overflows as soon as a day or
a time zone is added, an integer past 2**63 overflows bigint, and Python's json
recurses once per `[`. Each of those was a 500; the node agent retries every
5xx, so a batch the server can never store was sent again forever.

Checked here: the path, every query and form parameter (middleware), every path
converter's value (`process_view`), every JSON body (`SafeJSONParser`, before and
after parsing). Dates and integers that reach queries go through the helpers below.
"""

from __future__ import annotations

import re
from datetime import UTC, date, datetime, timedelta

from django import forms
from django.conf import settings
from django.core.exceptions import ValidationError as DjangoValidationError
from django.http import Http404, HttpResponse, JsonResponse
from django.template.loader import render_to_string
from rest_framework import exceptions, status
from rest_framework.parsers import JSONParser, get_encoding
from rest_framework.utils import json as drf_json

BAD_TEXT = re.compile("[\x00\ud800-\udfff]")
# In JSON text a NUL or a lone surrogate comes escaped (raw, it fails to parse or to
# decode): a body with neither an escape nor a raw one is not walked value by value
# (a tenth of the time an agent's batch of 500 events took).
MAYBE_BAD_TEXT = re.compile(r"\\u(?:0000|[dD][89a-fA-F])")
MAX_JSON_DEPTH = 32
MAX_BIGINT = 2**63 - 1
MAX_INT = 2**31 - 1
EARLIEST = date(2000, 1, 1)
LATEST = date(2099, 12, 31)


def text_problem(value) -> str | None:
    if isinstance(value, str) and (match := BAD_TEXT.search(value)):
        if match.group() == "\x00":
            return "must not contain NUL characters"
        return "must not contain unpaired surrogates"
    return None


def _refuse(request, field: str, message: str):
    text = f"{field} {message}."
    if request.path.startswith("/api/"):
        body = {"detail": "Invalid input.", "errors": {field: [text]}}
        return JsonResponse(body, status=400)
    # The bare page, without context processors: no session or user is known yet.
    page = render_to_string("error_bare.html", {"status": 400, "message": text})
    return HttpResponse(page, status=400)


FORM_TYPES = ("application/x-www-form-urlencoded", "multipart/form-data")


class HostileInputMiddleware:
    """The path and every GET and POST parameter: no NUL, no unpaired surrogate."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        refused = self.check(request)
        return refused or self.get_response(request)

    def check(self, request):
        if problem := text_problem(request.path):
            return _refuse(request, "path", problem)
        for name, value in request.COOKIES.items():
            # A session key with a NUL in it would reach a query on every page.
            if (problem := text_problem(name) or text_problem(value)) is not None:
                return _refuse(request, f"cookie {_printable(name)}", problem)
        params = [request.GET]
        if request.method == "POST" and request.content_type in FORM_TYPES:
            params.append(request.POST)
        for query in params:
            for name, values in query.lists():
                for value in (name, *values):
                    if problem := text_problem(value):
                        return _refuse(request, _printable(name), problem)
        return None

    def process_view(self, request, view_func, view_args, view_kwargs):
        for name, value in view_kwargs.items():
            if isinstance(value, int) and not -MAX_BIGINT <= value <= MAX_BIGINT:
                # No row has such an id: answer as for any other missing one.
                raise Http404(f"No such {name}.")
        return None


def _printable(name: str) -> str:
    return BAD_TEXT.sub("?", name)[:64] or "parameter"


# ---------------------------------------------------------------- JSON bodies


class PayloadTooLarge(exceptions.APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_detail = "Payload too large."


STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.S)
BRACKETS = re.compile(r"[\[\]{}]")


def json_depth(text: str) -> int:
    """The deepest nesting of arrays and objects, counted without parsing."""
    depth = deepest = 0
    for bracket in BRACKETS.findall(STRING.sub('""', text)):
        depth += 1 if bracket in "[{" else -1
        deepest = max(deepest, depth)
    return deepest


class SafeJSONParser(JSONParser):
    """DRF's JSON parser, bounded in size and depth first, text checked after."""

    def parse(self, stream, media_type=None, parser_context=None):
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        raw = stream.read(limit + 1) if stream is not None else b""
        if len(raw) > limit:
            raise PayloadTooLarge(f"Payload too large; at most {limit} bytes.")
        try:
            text = raw.decode(get_encoding(parser_context or {}))
        except UnicodeDecodeError as error:
            raise exceptions.ParseError(f"JSON parse error - {error}") from None
        if json_depth(text) > MAX_JSON_DEPTH:
            raise exceptions.ParseError(f"JSON nested deeper than {MAX_JSON_DEPTH} levels.")
        try:
            parse_constant = drf_json.strict_constant if self.strict else None
            data = drf_json.loads(text, parse_constant=parse_constant)
        except (ValueError, RecursionError) as error:
            raise exceptions.ParseError(f"JSON parse error - {error}") from None
        if MAYBE_BAD_TEXT.search(text) or BAD_TEXT.search(text):
            check_json_text(data)
        return data


def check_json_text(data, where: str = "") -> None:
    if isinstance(data, dict):
        for key, value in data.items():
            field = f"{where}.{key}" if where else str(key)
            if problem := text_problem(key):
                raise exceptions.ValidationError({_printable(field): [f"Keys {problem}."]})
            check_json_text(value, field)
    elif isinstance(data, list):
        for index, value in enumerate(data):
            check_json_text(value, f"{where}[{index}]")
    elif problem := text_problem(data):
        raise exceptions.ValidationError({where or "body": [f"This field {problem}."]})


# ---------------------------------------------------------------- dates, numbers


def in_range(moment: datetime | date | None) -> bool:
    """Whether a date or aware datetime lies where arithmetic on it cannot overflow."""
    if moment is None:
        return True
    try:
        if isinstance(moment, datetime):
            day = moment.astimezone(UTC).date() if moment.tzinfo else moment.date()
        else:
            day = moment
        return EARLIEST <= day <= LATEST and day + timedelta(days=1) > day
    except (OverflowError, ValueError):
        return False


def check_date_range(value) -> None:
    if not in_range(value):
        raise DjangoValidationError(
            f"Give a date between {EARLIEST.isoformat()} and {LATEST.isoformat()}."
        )


class BoundedDateField(forms.DateField):
    """A date between 2000 and 2099: later ones overflow once a day is added."""

    default_validators = [check_date_range]


def bounded_int(value, *, low: int = -MAX_INT, high: int = MAX_INT) -> int | None:
    """An integer from a query parameter, or None if it is not one or out of range."""
    try:
        number = int(value) if value not in (None, "") else None
    except (TypeError, ValueError):
        return None
    if number is None or not low <= number <= high:
        return None
    return number
