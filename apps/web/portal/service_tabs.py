"""The service page's tabs (templates/portal/service_detail.html, static/js/service-tabs.js): one template per tab,
`portal/partials/service_tab_<slug>.html`, so a new panel goes into the tab it belongs to. The chosen tab is the
`tab` query parameter, so a reload, a link or the back button shows the same tab."""

from __future__ import annotations

# slug, label, what the tab holds (read out with the tab).
TABS = [
    ("overview", "Overview", "health, replicas and the SLO"),
    ("traffic", "Traffic", "live figures, KV cache and the gateway"),
    ("scaling", "Scaling", "the autoscaler and its decisions"),
    ("changes", "Changes", "rollout, revisions and the audit"),
    ("cluster", "Cluster", "conditions, pools, pods, events and drift"),
    ("playground", "Playground", "send a request"),
]
DEFAULT_TAB = "overview"


def chosen_tab(request) -> str:
    """The tab the URL names; the overview for none or an unknown one."""
    tab = request.GET.get("tab", "")
    return tab if tab in {slug for slug, _, _ in TABS} else DEFAULT_TAB


def tab_context(request) -> dict:
    """The tab list as the template draws it, the chosen one marked."""
    chosen = chosen_tab(request)
    return {"tab": chosen, "tabs": [{"slug": slug, "label": label, "about": about, "selected": slug == chosen,
                                     "template": f"portal/partials/service_tab_{slug}.html"}
                                    for slug, label, about in TABS]}
