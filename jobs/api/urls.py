from django.urls import path

from jobs.api import views

urlpatterns = [
    path("jobs/", views.JobListView.as_view(), name="api-jobs"),
    path("jobs/<int:slurm_id>/", views.JobDetailView.as_view(), name="api-job"),
    path("jobs/<int:slurm_id>/resubmit/", views.JobResubmitView.as_view(), name="api-job-resubmit"),
    path("jobs/<int:slurm_id>/cancel/", views.JobCancelView.as_view(), name="api-job-cancel"),
    path("jobs/<int:slurm_id>/timeline/", views.JobTimelineView.as_view(), name="api-job-timeline"),
    path("jobs/<int:slurm_id>/progress/", views.JobProgressView.as_view(), name="api-job-progress"),
]
