from django.urls import path

from health import token_views, views

urlpatterns = [
    path("health/events/", views.event_feed, name="event-feed"),
    path("health/xid/", views.xid_catalogue, name="xid-catalogue"),
    path("health/xid/<int:code>/", views.xid_detail, name="xid-detail"),
    path("health/agents/", token_views.agent_tokens, name="agent-tokens"),
    path(
        "health/agents/<int:token_id>/revoke/",
        token_views.agent_token_revoke,
        name="agent-token-revoke",
    ),
]
