from rest_framework.routers import SimpleRouter

from remediation.api import RemediationViewSet

# A SimpleRouter: the main router in portal/urls.py owns the API root view.
router = SimpleRouter(trailing_slash=True)
router.register("remediations", RemediationViewSet, basename="remediation")

urlpatterns = router.urls
