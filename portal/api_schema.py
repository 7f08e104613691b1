"""The OpenAPI schema's shared parts: the error body, and the errors every operation can answer.

Its own module: `portal.api` is imported by DRF's generic views (the pagination
class), and drf-spectacular imports those, so the schema class cannot live there.
"""

from __future__ import annotations

from drf_spectacular.openapi import AutoSchema
from rest_framework import serializers
from rest_framework.permissions import AllowAny


class ErrorSerializer(serializers.Serializer):
    """Every error the API answers: a sentence, and per-field messages for bad input."""

    detail = serializers.CharField()
    errors = serializers.DictField(child=serializers.ListField(child=serializers.CharField()))


ERRORS = {
    400: "Invalid input: `errors` names each field at fault.",
    401: "No credentials, or unknown or revoked ones.",
    403: "Your role may not do this (or, with a session, the CSRF token is missing).",
    404: "No such object, or none you may see.",
    413: "Payload too large.",
    415: "Unsupported media type: send JSON (or a form).",
}


class MedbayAutoSchema(AutoSchema):
    """drf-spectacular's schema, with the errors every operation can answer documented.

    Each view documents its successes and its own errors (a 409, a 503); the ones
    below come from what every view shares, so a new view cannot forget them:
    any parameter may be refused (the hostile-input middleware checks every
    request's path and query, so a 400 is always possible), authentication and
    roles refuse, a path names an object that may not exist, a body may be too
    large or not JSON.
    """

    def get_operation(self, path, path_regex, path_prefix, method, registry):
        operation = super().get_operation(path, path_regex, path_prefix, method, registry)
        if operation is None:
            return None
        error = self.resolve_serializer(ErrorSerializer, "response").ref
        for code in self._error_codes(operation):
            operation["responses"].setdefault(
                str(code),
                {"content": {"application/json": {"schema": error}}, "description": ERRORS[code]},
            )
        operation["responses"] = dict(sorted(operation["responses"].items()))
        return operation

    def _error_codes(self, operation) -> list[int]:
        codes = [400]
        authenticated = bool(self.view.get_authenticators())
        if authenticated:
            codes.append(401)
        if authenticated or any(
            not isinstance(permission, AllowAny) for permission in self.view.get_permissions()
        ):
            codes.append(403)
        if any(parameter["in"] == "path" for parameter in operation.get("parameters", [])):
            codes.append(404)
        if "requestBody" in operation:
            codes += [413, 415]
        return codes
