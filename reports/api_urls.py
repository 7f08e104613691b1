from django.urls import path

from reports import api

urlpatterns = [
    path("reports/<slug:name>.csv", api.ReportCsvView.as_view(), name="api-report-csv"),
    path("reports/<slug:name>/", api.ReportView.as_view(), name="api-report"),
]
