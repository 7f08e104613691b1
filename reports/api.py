"""Reports over the API: JSON at `reports/<name>/`, CSV of any table at `reports/<name>.csv`."""

from __future__ import annotations

import csv
import io

from django.http import HttpResponse
from django.utils.text import get_valid_filename
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.permissions import BasePermission
from rest_framework.response import Response
from rest_framework.views import APIView

from core.roles import Role, has_role
from reports.base import Report, Table
from reports.catalog import REPORTS, compute
from reports.params import ALL, report_form

PARAMETERS = [
    OpenApiParameter("start", OpenApiTypes.DATE, description="first day (default: 30 days ago)"),
    OpenApiParameter("end", OpenApiTypes.DATE, description="last day, inclusive (default: today)"),
    OpenApiParameter(
        "group_by", str, enum=["day", "week", "partition", "pool", "account", "user", "qos"]
    ),
    OpenApiParameter("bucket", str, enum=["day", "week"], description="time bucket with a group"),
    OpenApiParameter(
        "cluster", str, description="a cluster's name; absent or `all`: every cluster combined"
    ),
]


class IsManagerOrAdmin(BasePermission):
    message = "Only managers and admins may read reports."

    def has_permission(self, request, view) -> bool:
        return has_role(request.user, Role.MANAGER, Role.ADMIN)


def table_json(table: Table) -> dict:
    return {"title": table.title, "columns": table.keys, "rows": table.rows}


def report_json(report: Report) -> dict:
    query = report.query
    return {
        "report": report.name,
        "title": report.title,
        "start": query.start.isoformat(),
        "end": query.end.isoformat(),
        "group_by": query.group_by,
        "bucket": query.bucket,
        # The cluster read, or "all" when every cluster is combined.
        "cluster": query.cluster or ALL,
        "summary": report.summary,
        "message": report.message,
        "notes": report.notes,
        "tables": {table.name: table_json(table) for table in report.tables},
    }


FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def csv_cell(value):
    """A cell a spreadsheet shows as text: `=HYPERLINK(...)` in an account name is not run."""
    if value is None:
        return ""
    if isinstance(value, str) and value.startswith(FORMULA_STARTS):
        return "'" + value
    return value


def table_csv(table: Table) -> str:
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow([csv_cell(key) for key in table.keys])
    writer.writerows([csv_cell(value) for value in row] for row in table.as_lists())
    return out.getvalue()


class ReportView(APIView):
    """A manager's report as JSON (`reports/<name>/`) or one table as CSV (`.csv`)."""

    permission_classes = [IsManagerOrAdmin]

    def _report(self, request, name: str) -> Report:
        if name not in REPORTS:
            raise NotFound(f"No report named {name!r}; try one of {', '.join(REPORTS)}.")
        form = report_form(request)
        if not form.is_valid():
            errors = {field: [str(error) for error in errs] for field, errs in form.errors.items()}
            raise ValidationError(errors)
        return compute(name, form.query())

    @extend_schema(parameters=PARAMETERS, responses=OpenApiTypes.OBJECT)
    def get(self, request, name: str):
        return Response(report_json(self._report(request, name)))


class ReportCsvView(ReportView):
    @extend_schema(
        parameters=[*PARAMETERS, OpenApiParameter("table", str, description="default: main")],
        responses={(200, "text/csv"): OpenApiTypes.STR},
    )
    def get(self, request, name: str):
        report = self._report(request, name)
        try:
            table = report.table(request.query_params.get("table"))
        except KeyError:
            names = ", ".join(table.name for table in report.tables)
            raise ValidationError({"table": [f"Choose one of: {names}."]}) from None
        response = HttpResponse(table_csv(table), content_type="text/csv; charset=utf-8")
        query = report.query
        scope = f"-{get_valid_filename(query.cluster)}" if query.cluster else ""
        filename = f"{report.name}-{table.name}{scope}-{query.start}-{query.end}.csv"
        response["Content-Disposition"] = f'attachment; filename="{filename}"'
        return response
