from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView
from rest_framework.routers import DefaultRouter

from clusters.api.views import NodeViewSet
from health.api.views import HealthEventsView
from identity.views.clusters import choose as choose_cluster
from identity.views.login import LoginForm, ThrottledObtainAuthToken
from identity.views.tokens import api_token_revoke, api_tokens
from portal.metrics import metrics_view
from portal.overview import overview

router = DefaultRouter(trailing_slash=True)
router.register("nodes", NodeViewSet, basename="node")

api_patterns = [
    path("auth/token/", ThrottledObtainAuthToken.as_view(), name="api-token"),
    path("schema/", SpectacularAPIView.as_view(), name="api-schema"),
    # The split view serves its init script as a file (?script), for the CSP.
    path(
        "docs/",
        SpectacularSwaggerSplitView.as_view(
            url_name="api-schema", template_name="api/swagger_ui.html"
        ),
        name="api-docs",
    ),
    path("health/events/", HealthEventsView.as_view(), name="api-health-events"),
    path("", include("jobs.api.urls")),
    path("", include("remediation.api_urls")),
    path("", include("reports.api_urls")),
    path("", include(router.urls)),
]

urlpatterns = [
    path("login/", auth_views.LoginView.as_view(authentication_form=LoginForm), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("oidc/", include("identity.views.oidc")),
    path("admin/", admin.site.urls),
    path("account/tokens/", api_tokens, name="api-tokens"),
    path("account/tokens/<int:token_id>/revoke/", api_token_revoke, name="api-token-revoke"),
    path("clusters/choose/", choose_cluster, name="cluster-choose"),
    path("clusters/overview/", overview, name="cluster-overview"),
    path("metrics", metrics_view, name="metrics"),
    path("api/v1/", include(api_patterns)),
    path("", include("health.urls")),
    path("", include("jobs.urls")),
    path("", include("remediation.urls")),
    path("", include("reports.urls")),
    path("", include("demand.urls")),
    path("", include("clusters.urls")),
]

handler400 = "portal.views.bad_request"
handler403 = "portal.views.permission_denied"
handler404 = "portal.views.page_not_found"
handler500 = "portal.views.server_error"
