"""Portal flows through the Django test client: each write goes through the same rules as the API and
leaves an audit entry; bad input gets inline errors and changes nothing."""

from __future__ import annotations

from django.contrib.messages import get_messages
from django.urls import reverse

from apps.core.models import AuditEntry
from apps.serving.models import InferenceService
from apps.tenancy.models import ApiToken, Membership, hash_token
from apps.tenancy.queues import set_gpu_quota
from tests.web.portal.forms import service_post


def test_creating_a_service_saves_the_whole_spec_and_says_when_it_will_be_ready(login, operator_a, catalog_a, cluster):
    data = service_post(model=catalog_a["model"], runtime=catalog_a["runtime"], max_model_len=8192,
                        enable_prefix_caching="true", kv_cache_dtype="fp8_e4m3", autoscaler="builtin",
                        target_kv_cache_usage=0.8, scale_down_stabilization_seconds=120,
                        pools={"engine": {"replicas": 2, "max_replicas": 3, "gpu_type": "l4-24gb"}})
    response = login(operator_a).post(reverse("web:service-create", args=["alpha"]), data)

    assert response.status_code == 302
    service = InferenceService.objects.get(tenant__slug="alpha", name="new-chat")
    assert response["Location"] == reverse("web:service", args=["alpha", "new-chat"])
    assert service.engine_settings == {"max_model_len": 8192, "enable_prefix_caching": True,
                                       "kv_cache_dtype": "fp8_e4m3", "tensor_parallel_size": 1,
                                       "pipeline_parallel_size": 1}
    # The built-in autoscaler's defaults are written out on save (Kubernetes' default behavior, with the
    # form's scale-down window), so what runs is what the spec shows.
    assert service.autoscaling == {
        "autoscaler": "builtin", "targets": {"kv_cache_usage": 0.8}, "tolerance": 0.1,
        "scale_up_stabilization_seconds": 0, "scale_down_stabilization_seconds": 120,
        "behavior": {"scale_up": {"stabilization_window_s": 0, "select_policy": "Max",
                                  "policies": [{"type": "Percent", "value": 100, "period_s": 15},
                                               {"type": "Pods", "value": 4, "period_s": 15}]},
                     "scale_down": {"stabilization_window_s": 120, "select_policy": "Max",
                                    "policies": [{"type": "Percent", "value": 100, "period_s": 15}]}},
        "pools": {"engine": {"targets": {"kv_cache_usage": 0.8}}}}
    pool = service.pools.get()
    assert (pool.replicas, pool.min_replicas, pool.max_replicas, pool.gpu_type) == (2, 1, 3, "l4-24gb")
    assert AuditEntry.objects.filter(object_id=str(service.pk), action="create", via="portal").exists()
    assert "Ready in about a minute" in next(str(m) for m in get_messages(response.wsgi_request))


def test_bad_input_gets_the_api_s_errors_beside_the_fields_and_writes_nothing(login, operator_a, catalog_a, cluster,
                                                                              tenant_a):
    set_gpu_quota(tenant_a, 4)
    data = service_post(model=catalog_a["model"], runtime=catalog_a["runtime"], kv_cache_dtype="fp9",
                        pools={"engine": {"replicas": 3, "max_replicas": 2, "gpus_per_replica": 4}})
    response = login(operator_a).post(reverse("web:service-create", args=["alpha"]), data)

    assert response.status_code == 422
    html = response.content.decode()
    # engine_settings "kv_cache_dtype: …" lands beside the KV-cache dtype box, pools "engine.replicas: …" beside
    # the engine pool's replicas box.
    form = response.context["form"]
    assert "'fp9' is not a KV-cache dtype vllm accepts" in form.errors["kv_cache_dtype"][0]
    pool_form = response.context["pools"][0]
    assert "replicas (3) must not exceed max_replicas (2)" in pool_form.errors["replicas"][0]
    assert 'aria-invalid="true"' in html
    assert not InferenceService.objects.filter(name="new-chat").exists()


def test_the_quota_message_of_the_model_shows_above_the_pools(login, operator_a, catalog_a, cluster, tenant_a):
    set_gpu_quota(tenant_a, 4)
    data = service_post(model=catalog_a["model"], runtime=catalog_a["runtime"],
                        pools={"engine": {"replicas": 1, "max_replicas": 3, "gpus_per_replica": 2}})
    response = login(operator_a).post(reverse("web:service-create", args=["alpha"]), data)
    assert response.status_code == 422
    assert ("GPU quota exceeded for tenant alpha: requested 6 GPUs at maximum replicas, 0 already used by other "
            "services, 4 allowed.") in response.context["group_errors"]["pools"]


def test_a_stale_edit_shows_what_changed_meanwhile_and_saving_again_applies_it_on_top(login, operator_a, owner_a,
                                                                                       service_a, catalog_a):
    url = reverse("web:service-edit", args=["alpha", "chat"])
    form_page = login(operator_a).get(url)
    initial = form_page.context["form"].initial
    # Meanwhile the owner changes the max model length.
    owner_data = service_post(name="", model=catalog_a["model"], runtime=catalog_a["runtime"],
                              version=initial["version"], base=initial["base"], max_model_len=4096,
                              pools={"engine": {"max_replicas": 4}})
    assert login(owner_a).post(url, owner_data).status_code == 302

    mine = service_post(name="", model=catalog_a["model"], runtime=catalog_a["runtime"], version=initial["version"],
                        base=initial["base"], enable_prefix_caching="true", pools={"engine": {"max_replicas": 4}})
    stale = login(operator_a).post(url, mine)

    assert stale.status_code == 409
    assert ("Max model length (tokens)", "", "4096") in stale.context["stale"]["changes"]
    assert stale.context["stale"]["by"] == ["olivia-owner"]
    service_a.refresh_from_db()
    assert service_a.engine_settings.get("enable_prefix_caching") is None  # nothing of mine was written yet
    again = stale.context["form"].data
    # My change stays; what I did not touch follows what was saved meanwhile.
    assert again["enable_prefix_caching"] == "true" and again["max_model_len"] == "4096"
    assert again["version"] == str(service_a.version)
    assert 'id="stale"' in stale.content.decode()

    applied = login(operator_a).post(url, again)
    assert applied.status_code == 302
    service_a.refresh_from_db()
    assert service_a.engine_settings["enable_prefix_caching"] is True
    assert service_a.engine_settings["max_model_len"] == 4096


def test_scaling_sets_replicas_min_and_max_and_refuses_sizes_outside_them(login, operator_a, service_a):
    url = reverse("web:service-scale", args=["alpha", "chat"])
    generation = service_a.generation
    bad = login(operator_a).post(url, {"version": service_a.version, "engine-replicas": 5,
                                       "engine-min_replicas": 1, "engine-max_replicas": 4})
    assert bad.status_code == 422
    assert "replicas (5) must not exceed max_replicas (4)" in bad.context["rows"][0][1].errors["replicas"][0]

    good = login(operator_a).post(url, {"version": service_a.version, "engine-replicas": 3,
                                        "engine-min_replicas": 2, "engine-max_replicas": 6})
    assert good.status_code == 302
    pool = service_a.pools.get()
    assert (pool.replicas, pool.min_replicas, pool.max_replicas) == (3, 2, 6)
    service_a.refresh_from_db()
    assert service_a.generation == generation + 1


def test_deleting_needs_the_name_typed_and_then_marks_the_service_deleting(login, operator_a, service_a):
    url = reverse("web:service-delete", args=["alpha", "chat"])
    wrong = login(operator_a).post(url, {"confirm": "cha"})
    assert wrong.status_code == 422 and "Type chat exactly" in wrong.content.decode()
    service_a.refresh_from_db()
    assert not service_a.is_deleting

    assert login(operator_a).post(url, {"confirm": "chat"}).status_code == 302
    service_a.refresh_from_db()
    assert service_a.phase == "Deleting" and service_a.is_deleting
    page = login(operator_a).get(reverse("web:service", args=["alpha", "chat"])).content.decode()
    assert "Deleting" in page and ">Edit<" not in page


def test_a_token_is_shown_once_bound_to_the_tenant_and_expires(login, operator_a):
    response = login(operator_a).post(reverse("web:tokens", args=["alpha"]), {"name": "ci", "expires_days": 7})
    plaintext = response.context["issued"]["plaintext"]
    token = ApiToken.objects.get(key_hash=hash_token(plaintext))
    assert token.tenant.slug == "alpha" and token.user == operator_a and token.name == "ci"
    assert 6.9 < (token.expires_at - token.created).total_seconds() / 86400 <= 7.0
    assert plaintext in response.content.decode()
    listing = login(operator_a).get(reverse("web:tokens", args=["alpha"])).content.decode()
    assert plaintext not in listing and f"{plaintext[:8]}…" in listing


def test_owners_add_members_by_e_mail_and_change_their_roles(login, owner_a):
    from tests.factories import UserFactory

    UserFactory(username="newbie", email="newbie@example.org")
    client = login(owner_a)
    added = client.post(reverse("web:members", args=["alpha"]), {"user": "NEWBIE@example.org", "role": "operator"})
    assert added.status_code == 200
    membership = Membership.objects.get(tenant__slug="alpha", user__username="newbie")
    assert membership.role == "operator"
    unknown = client.post(reverse("web:members", args=["alpha"]), {"user": "nobody", "role": "viewer"})
    assert unknown.status_code == 422 and "No user &#x27;nobody&#x27;" in unknown.content.decode()
    again = client.post(reverse("web:members", args=["alpha"]), {"user": "newbie", "role": "viewer"})
    assert again.status_code == 422 and "already a member" in again.content.decode()


def test_the_last_owner_can_be_neither_demoted_nor_removed_in_the_portal(login, owner_a, operator_a):
    own = Membership.objects.get(user=owner_a, tenant__slug="alpha")
    url = reverse("web:member-change", args=["alpha", own.pk])
    client = login(owner_a)
    demote = client.post(url, {"action": "role", "role": "viewer"})
    assert demote.status_code == 422 and "last owner" in demote.content.decode()
    remove = client.post(url, {"action": "remove"})
    assert remove.status_code == 422 and "last owner" in remove.content.decode()
    own.refresh_from_db()
    assert own.role == "owner"
    # With a second owner, the first may step down.
    other = Membership.objects.get(user=operator_a, tenant__slug="alpha")
    assert client.post(reverse("web:member-change", args=["alpha", other.pk]),
                       {"action": "role", "role": "owner"}).status_code == 302
    assert client.post(url, {"action": "role", "role": "viewer"}, HTTP_HX_REQUEST="true").status_code == 200
    own.refresh_from_db()
    assert own.role == "viewer"


def test_the_audit_page_filters_by_object_and_actor_and_shows_before_and_after(login, operator_a, owner_a, service_a):
    client = login(operator_a)
    client.post(reverse("web:service-scale", args=["alpha", "chat"]),
                {"version": service_a.version, "engine-replicas": 2, "engine-min_replicas": 1, "engine-max_replicas": 4})
    login(owner_a).post(reverse("web:tokens", args=["alpha"]), {"name": "owner-ci", "expires_days": 7})
    page = login(owner_a).get(reverse("web:audit", args=["alpha"]), {"object": "chat", "actor": "oscar"})
    entries = list(page.context["page"].object_list)
    assert [e.object_repr for e in entries] == ["alpha/chat"]
    html = page.content.decode()
    assert "<code>generation</code>: <del>1</del> → <ins>2</ins>" in html
    assert "owner-ci" not in html


def test_the_audit_page_filters_by_kind(login, owner_a, service_a):
    login(owner_a).post(reverse("web:tokens", args=["alpha"]), {"name": "owner-ci", "expires_days": 7})
    page = login(owner_a).get(reverse("web:audit", args=["alpha"]), {"kind": "apitoken"})
    assert [e.content_type.model for e in page.context["page"].object_list] == ["apitoken"]
    assert "apitoken" in page.context["kinds"]


def test_the_fleet_page_links_a_member_to_their_tenants(login, viewer_a, tenant_b):
    html = login(viewer_a).get(reverse("web:home")).content.decode()
    assert f'href="{reverse("web:overview", args=["alpha"])}"' in html
    assert reverse("web:overview", args=["bravo"]) not in html
