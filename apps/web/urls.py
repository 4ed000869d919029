from django.contrib.auth import views as auth_views
from django.urls import path

from apps.web import services, views

app_name = "web"

urlpatterns = [
    path("", views.home, name="home"),
    path("services/", services.service_list, name="services"),
    path("services/<int:pk>/", services.service_detail, name="service"),
    path("services/<int:pk>/series/", services.service_series, name="service-series"),
    path("login/", auth_views.LoginView.as_view(template_name="web/login.html"), name="login"),
    path("logout/", auth_views.LogoutView.as_view(next_page="web:login"), name="logout"),
]
