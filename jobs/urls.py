from django.urls import path

from jobs import output_views, preference_views, views

urlpatterns = [
    path("jobs/", views.queue, name="job-queue"),
    path("jobs/new", views.new_job, name="job-new"),
    path("jobs/new/preview", views.preview, name="job-preview"),
    path("jobs/templates/", views.template_list, name="job-templates"),
    path(
        "jobs/templates/<int:template_id>/delete", views.template_delete, name="job-template-delete"
    ),
    path("jobs/<str:cluster>/<int:slurm_id>/", views.detail, name="cluster-job"),
    path("jobs/<str:cluster>/<int:slurm_id>/story", views.story, name="cluster-job-story"),
    path("jobs/<str:cluster>/<int:slurm_id>/resubmit", views.resubmit, name="cluster-job-resubmit"),
    path("jobs/<str:cluster>/<int:slurm_id>/cancel", views.cancel, name="cluster-job-cancel"),
    path(
        "jobs/<str:cluster>/<int:slurm_id>/output/",
        output_views.output_panel,
        name="cluster-job-output",
    ),
    path(
        "jobs/<str:cluster>/<int:slurm_id>/output/raw",
        output_views.output_raw,
        name="cluster-job-output-raw",
    ),
    # Before jobs had cluster addresses: by id alone, where that is one job's (the
    # page itself leads to its cluster address), else a page that asks which.
    path("jobs/<int:slurm_id>/", views.detail, name="job-detail"),
    path("jobs/<int:slurm_id>/story", views.story, name="job-story"),
    path("jobs/<int:slurm_id>/resubmit", views.resubmit, name="job-resubmit"),
    path("jobs/<int:slurm_id>/cancel", views.cancel, name="job-cancel"),
    path("jobs/<int:slurm_id>/output/", output_views.output_panel, name="job-output"),
    path("jobs/<int:slurm_id>/output/raw", output_views.output_raw, name="job-output-raw"),
    path(
        "account/notifications/",
        preference_views.preferences,
        name="notification-preferences",
    ),
    path("account/notifications/test", preference_views.send_test, name="notification-test"),
]
