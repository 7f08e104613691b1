from django.urls import path

from health import views

urlpatterns = [
    path("health/events/", views.event_feed, name="event-feed"),
    path("health/xid/", views.xid_catalogue, name="xid-catalogue"),
    path("health/xid/<int:code>/", views.xid_detail, name="xid-detail"),
]
