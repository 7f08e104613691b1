from django.urls import path

from reports import views

urlpatterns = [
    path("reports/", views.report_page, name="reports"),
    path("reports/<slug:name>/", views.report_page, name="report"),
]
