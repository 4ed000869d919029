from rest_framework.routers import SimpleRouter

from apps.whatif.api import views

router = SimpleRouter()
router.register("whatif", views.RunViewSet, basename="whatif-run")
router.register("whatif-traces", views.TraceViewSet, basename="whatif-trace")
router.register("whatif-advice", views.AdviceViewSet, basename="whatif-advice")
router.register("whatif-calibrations", views.CalibrationViewSet, basename="whatif-calibration")
urlpatterns = router.urls
