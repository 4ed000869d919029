from django.contrib.auth import views as auth_views
from django.urls import path

from apps.web import nodes, scaling, services, views
from apps.web.portal import (
    batches,
    catalog,
    gateway,
    kv_panel,
    lab,
    overview,
    playground,
    queue_card,
    queues,
    revisions,
    rollouts,
    tenancy,
)
from apps.web.portal import services as portal_services

app_name = "web"

T = "t/<slug:tenant>/"
S = T + "services/<slug:name>/"

urlpatterns = [
    path("", views.home, name="home"),
    path("services/", services.service_list, name="services"),
    path("services/<int:pk>/", services.service_redirect, name="service-by-id"),
    path("services/<int:pk>/series/", services.service_series, name="service-series-by-id"),
    path("services/<int:pk>/scaling/", scaling.scaling_panel, name="scaling-panel"),
    path("nodes/", nodes.node_page, name="nodes"),
    path("scaling/decisions/", scaling.fleet_decisions, name="fleet-decisions"),
    path("login/", auth_views.LoginView.as_view(template_name="web/login.html"), name="login"),
    path("logout/", auth_views.LogoutView.as_view(next_page="web:login"), name="logout"),
    # The tenant portal.
    path("t/", overview.switch, name="switch"),
    path(T, overview.overview, name="overview"),
    path(T + "services/", portal_services.service_list, name="tenant-services"),
    path(T + "services/new/", portal_services.service_create, name="service-create"),
    path(T + "services/form-parts/", portal_services.service_form_parts, name="service-form-parts"),
    path(S, portal_services.service_detail, name="service"),
    path(S + "series/", portal_services.service_series, name="service-series"),
    path(S + "edit/", portal_services.service_edit, name="service-edit"),
    path(S + "scale/", portal_services.service_scale, name="service-scale"),
    path(S + "delete/", portal_services.service_delete, name="service-delete"),
    path(S + "revisions/", revisions.revisions_panel, name="service-revisions"),
    path(S + "revisions/<int:number>/rollback/", revisions.revision_rollback, name="revision-rollback"),
    path(S + "rollout/", rollouts.rollout_panel, name="service-rollout"),
    path(S + "kv-reuse/", kv_panel.kv_reuse_panel, name="service-kv-reuse"),
    path(S + "queue-card/", queue_card.queue_card_panel, name="service-queue-card"),
    path(S + "rollout/<str:action>/", rollouts.rollout_action, name="rollout-action"),
    path(S + "playground/", playground.playground, name="playground"),
    path(S + "lab/", lab.lab, name="lab"),
    path(S + "lab/traces/", lab.lab_upload, name="lab-upload"),
    path(S + "lab/search/", lab.lab_search, name="lab-search"),
    path(S + "lab/runs/<int:run_id>/", lab.lab_run, name="lab-run"),
    path(S + "lab/runs/<int:run_id>/cancel/", lab.lab_cancel, name="lab-cancel"),
    path(S + "lab/runs/<int:run_id>/apply/", lab.lab_apply, name="lab-apply"),
    path(S + "advice/<int:advice_id>/dismiss/", lab.advice_dismiss, name="advice-dismiss"),
    path(S + "playground/stream/", playground.stream, name="playground-stream"),
    path(T + "tokens/", tenancy.tokens, name="tokens"),
    path(T + "tokens/<int:pk>/revoke/", tenancy.token_revoke, name="token-revoke"),
    path(T + "inference-keys/", gateway.inference_keys, name="inference-keys"),
    path(T + "inference-keys/<int:pk>/<str:action>/", gateway.inference_key_action, name="inference-key-action"),
    path(T + "usage/", gateway.usage_page, name="usage"),
    path(T + "usage.csv", gateway.usage_csv, name="usage-csv"),
    path(T + "batches/", batches.batches_page, name="batches"),
    path(T + "batches/<str:batch_id>/cancel/", batches.batch_cancel, name="batch-cancel"),
    path(T + "files/<str:file_id>/", batches.file_download, name="file-download"),
    path(T + "queues/", queues.queues, name="queues"),
    path(T + "queues/<int:pk>/", queues.queue_edit, name="queue-edit"),
    path(T + "members/", tenancy.members, name="members"),
    path(T + "members/<int:pk>/", tenancy.member_change, name="member-change"),
    path(T + "catalog/<str:kind>/", catalog.catalog, name="catalog"),
    path(T + "catalog/<str:kind>/new/", catalog.catalog_edit, name="catalog-create"),
    path(T + "catalog/<str:kind>/<int:pk>/", catalog.catalog_edit, name="catalog-edit"),
    path(T + "catalog/<str:kind>/<int:pk>/delete/", catalog.catalog_delete, name="catalog-delete"),
    path(T + "audit/", overview.audit, name="audit"),
]
