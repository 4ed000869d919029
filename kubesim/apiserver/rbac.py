"""The RBAC authorizer: request attributes, who is asking, and the decision from stored Roles and bindings.

Evaluated as upstream's RBAC authorizer does: the ClusterRoleBindings that name the user (by User, Group or
ServiceAccount subject) grant their ClusterRole's rules everywhere; the RoleBindings of the request's namespace
grant their Role's (or ClusterRole's) rules in that namespace. A rule matches on verbs, apiGroups, resources
(`pods`, `pods/log`, `*`, `pods/*`, `*/scale`), resourceNames, or nonResourceURLs (`/healthz`, `/apis/*`).
ClusterRoles with an aggregationRule take the rules of the ClusterRoles their selectors match. Members of
`system:masters` may do anything (as the apiserver's superuser group). Denials carry the apiserver's wording.
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import ApiError
from .selectors import parse_label_selector

MASTERS = "system:masters"
AUTHENTICATED = "system:authenticated"
SA_PREFIX = "system:serviceaccount:"
RBAC = "rbac.authorization.k8s.io/v1"


@dataclass(frozen=True)
class User:
    """An authenticated user: name, groups, uid (as in a TokenReview's UserInfo)."""

    name: str
    groups: tuple[str, ...] = ()
    uid: str = ""

    @property
    def service_account(self) -> tuple[str, str] | None:
        """(namespace, name) for `system:serviceaccount:<ns>:<name>`, else None."""
        if not self.name.startswith(SA_PREFIX):
            return None
        ns, _, name = self.name[len(SA_PREFIX):].partition(":")
        return (ns, name) if ns and name else None


ADMIN = User("kubesim-admin", (MASTERS, AUTHENTICATED))


def service_account_user(namespace: str, name: str, uid: str = "") -> User:
    """The user a ServiceAccount token authenticates as, with the groups the apiserver gives it."""
    return User(f"{SA_PREFIX}{namespace}:{name}",
                ("system:serviceaccounts", f"system:serviceaccounts:{namespace}", AUTHENTICATED), uid)


@dataclass
class Attributes:
    """What a request asks to do (upstream's authorizer.Attributes)."""

    verb: str
    namespace: str = ""
    group: str = ""
    resource: str = ""
    subresource: str = ""
    name: str = ""
    path: str = ""
    resource_request: bool = True

    def resource_path(self) -> str:
        return f"{self.resource}/{self.subresource}" if self.subresource else self.resource


_VERBS = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}
_NAMESPACE_SUBRESOURCES = {"status", "finalize"}


def request_attributes(method: str, path: str, query) -> Attributes:
    """Attributes of an HTTP request, parsed as upstream's RequestInfoFactory parses them."""
    parts = [p for p in path.split("/") if p]
    if not parts or parts[0] not in ("api", "apis"):
        return Attributes(verb=method.lower() if method != "HEAD" else "get", path=path, resource_request=False)
    if parts[0] == "api":
        group, rest = "", parts[2:] if len(parts) >= 2 else []
    else:
        group, rest = (parts[1], parts[3:]) if len(parts) >= 3 else ("", [])
    if not rest:  # discovery documents
        return Attributes(verb=method.lower(), path=path, resource_request=False)
    verb = _VERBS.get(method, "get")
    watch = False
    if rest[0] == "watch":
        watch, rest = True, rest[1:]
    namespace = ""
    if rest and rest[0] == "namespaces" and len(rest) > 1:
        namespace = rest[1]
        if len(rest) > 2 and rest[2] not in _NAMESPACE_SUBRESOURCES:
            rest = rest[2:]
    attrs = Attributes(verb=verb, namespace=namespace, group=group, path=path)
    attrs.resource = rest[0] if rest else ""
    attrs.name = rest[1] if len(rest) > 1 else ""
    attrs.subresource = rest[2] if len(rest) > 2 else ""
    if method in ("GET", "HEAD"):
        if watch or str(query.get("watch", "")).lower() in ("true", "1"):
            attrs.verb = "watch"
        elif not attrs.name:
            attrs.verb = "list"
    elif method == "DELETE" and not attrs.name:
        attrs.verb = "deletecollection"
    if attrs.subresource in ("exec", "attach", "portforward"):
        attrs.verb = "create"  # upgraded GETs need create since 1.31 (AuthorizePodWebsocketUpgradeCreatePermission)
    return attrs


# ---------------------------------------------------------------------------------------------- rules


def _rule_allows(rule: dict, attrs: Attributes) -> bool:
    verbs = rule.get("verbs") or []
    if "*" not in verbs and attrs.verb not in verbs:
        return False
    if not attrs.resource_request:
        for url in rule.get("nonResourceURLs") or []:
            if url == "*" or url == attrs.path or (url.endswith("*") and attrs.path.startswith(url[:-1])):
                return True
        return False
    groups = rule.get("apiGroups") or []
    if "*" not in groups and attrs.group not in groups:
        return False
    wanted, matched = attrs.resource_path(), False
    for res in rule.get("resources") or []:
        if res in ("*", wanted) or (attrs.subresource and res == f"*/{attrs.subresource}") \
                or (res == f"{attrs.resource}/*" and attrs.subresource):
            matched = True
            break
    if not matched:
        return False
    names = rule.get("resourceNames") or []
    return not names or attrs.name in names


def _subject_matches(subject: dict, user: User, binding_namespace: str) -> bool:
    kind, name = subject.get("kind"), subject.get("name")
    if kind == "User":
        return name == user.name
    if kind == "Group":
        return name in user.groups
    if kind == "ServiceAccount":
        sa = user.service_account
        return sa is not None and sa == (subject.get("namespace") or binding_namespace, name)
    return False


def _describe_subject(subject: dict, binding_namespace: str) -> str:
    if subject.get("kind") == "ServiceAccount":
        return f'ServiceAccount "{subject.get("name")}/{subject.get("namespace") or binding_namespace}"'
    return f'{subject.get("kind")} "{subject.get("name")}"'


class Authorizer:
    """Decides requests from the Roles, ClusterRoles and bindings in a store."""

    def __init__(self, store):
        self.store = store

    def _cluster_role_rules(self, name: str) -> list[dict] | None:
        try:
            role = self.store.get(f"{RBAC}/clusterroles", None, name)
        except ApiError:
            return None
        rules = list(role.get("rules") or [])
        selectors = (role.get("aggregationRule") or {}).get("clusterRoleSelectors") or []
        if selectors:
            others, _ = self.store.list(f"{RBAC}/clusterroles")
            for other in others:
                if other["metadata"]["name"] != name and any(labels_match(s, other) for s in selectors):
                    rules.extend(other.get("rules") or [])
        return rules

    def _role_rules(self, ref: dict, namespace: str) -> list[dict] | None:
        if ref.get("kind") == "ClusterRole":
            return self._cluster_role_rules(ref.get("name", ""))
        try:
            return list(self.store.get(f"{RBAC}/roles", namespace, ref.get("name", "")).get("rules") or [])
        except ApiError:
            return None

    def decide(self, user: User, attrs: Attributes) -> tuple[bool, str]:
        """(allowed, reason) worded as upstream's RBAC authorizer."""
        if MASTERS in user.groups:
            return True, ""
        if _always_allowed(user, attrs):
            return True, ""
        bindings, _ = self.store.list(f"{RBAC}/clusterrolebindings")
        for binding in bindings:
            for subject in binding.get("subjects") or []:
                if not _subject_matches(subject, user, ""):
                    continue
                ref = binding.get("roleRef") or {}
                rules = self._cluster_role_rules(ref.get("name", "")) if ref.get("kind") == "ClusterRole" else None
                if rules and any(_rule_allows(r, attrs) for r in rules):
                    return True, (f'RBAC: allowed by ClusterRoleBinding "{binding["metadata"]["name"]}" of '
                                  f'ClusterRole "{ref.get("name")}" to {_describe_subject(subject, "")}')
        if attrs.namespace:
            bindings, _ = self.store.list(f"{RBAC}/rolebindings", attrs.namespace)
            for binding in bindings:
                for subject in binding.get("subjects") or []:
                    if not _subject_matches(subject, user, attrs.namespace):
                        continue
                    ref = binding.get("roleRef") or {}
                    rules = self._role_rules(ref, attrs.namespace)
                    if rules and any(_rule_allows(r, attrs) for r in rules):
                        return True, (f'RBAC: allowed by RoleBinding "{binding["metadata"]["name"]}/{attrs.namespace}"'
                                      f' of {ref.get("kind")} "{ref.get("name")}" to '
                                      f'{_describe_subject(subject, attrs.namespace)}')
        return False, ""


def labels_match(selector: dict, obj: dict) -> bool:
    """Whether `obj` matches a LabelSelector's matchLabels and matchExpressions (an empty one matches nothing)."""
    terms = [f"{k}={v}" for k, v in sorted((selector.get("matchLabels") or {}).items())]
    for expr in selector.get("matchExpressions") or []:
        op, key, values = expr.get("operator"), expr.get("key"), expr.get("values") or []
        if op == "In":
            terms.append(f"{key} in ({','.join(values)})")
        elif op == "NotIn":
            terms.append(f"{key} notin ({','.join(values)})")
        elif op == "Exists":
            terms.append(key)
        elif op == "DoesNotExist":
            terms.append(f"!{key}")
    match = parse_label_selector(",".join(terms)) if terms else None
    return match is not None and bool(match(obj))


# What every authenticated user may do on a real cluster (system:basic-user, system:discovery,
# system:public-info-viewer): ask about its own permissions and read discovery.
_DISCOVERY_PATHS = ("/api", "/apis", "/version", "/openapi", "/healthz", "/livez", "/readyz")


def _always_allowed(user: User, attrs: Attributes) -> bool:
    if AUTHENTICATED not in user.groups:
        return False
    if attrs.resource_request:
        return (attrs.group == "authorization.k8s.io" and attrs.verb == "create"
                and attrs.resource in ("selfsubjectaccessreviews", "selfsubjectrulesreviews")) or \
               (attrs.group == "authentication.k8s.io" and attrs.verb == "create"
                and attrs.resource == "selfsubjectreviews")
    return attrs.verb == "get" and any(attrs.path == p or attrs.path.startswith(p + "/") for p in _DISCOVERY_PATHS)


def forbidden(user: User, attrs: Attributes, reason: str = "") -> ApiError:
    """403 Forbidden in the apiserver's words for a denied request."""
    if not attrs.resource_request:
        message = f'forbidden: User "{user.name}" cannot {attrs.verb} path "{attrs.path}"'
        return ApiError(403, "Forbidden", message + (f": {reason}" if reason else ""), {})
    resource = attrs.resource_path()
    where = (f'in the namespace "{attrs.namespace}"' if attrs.namespace else "at the cluster scope")
    detail = (f'User "{user.name}" cannot {attrs.verb} resource "{resource}" in API group "{attrs.group}" {where}'
              + (f": {reason}" if reason else ""))
    gr = f"{attrs.resource}.{attrs.group}" if attrs.group else attrs.resource
    head = f'{gr} "{attrs.name}" is forbidden' if attrs.name else f"{gr} is forbidden"
    return ApiError(403, "Forbidden", f"{head}: {detail}",
                    {"name": attrs.name, "group": attrs.group, "kind": attrs.resource})


def review_attributes(spec: dict) -> Attributes:
    """Attributes of a SubjectAccessReview spec (resourceAttributes or nonResourceAttributes)."""
    res = spec.get("resourceAttributes")
    if isinstance(res, dict):
        return Attributes(verb=res.get("verb") or "", namespace=res.get("namespace") or "",
                          group=res.get("group") or "", resource=res.get("resource") or "",
                          subresource=res.get("subresource") or "", name=res.get("name") or "")
    non = spec.get("nonResourceAttributes")
    if isinstance(non, dict):
        return Attributes(verb=non.get("verb") or "", path=non.get("path") or "", resource_request=False)
    raise ApiError.invalid("SubjectAccessReview", "SubjectAccessReview.authorization.k8s.io", "",
                           "authorization.k8s.io", [{
                               "reason": "FieldValueRequired", "field": "spec.resourceAttributes",
                               "message": "Required value: exactly one of nonResourceAttributes or "
                                          "resourceAttributes must be specified"}])


def default_cluster_roles() -> list[tuple[str, dict]]:
    """The ClusterRoles and ClusterRoleBindings a new cluster starts with, that kubesim's RBAC relies on."""
    labels = {"kubernetes.io/bootstrapping": "rbac-defaults"}
    annotations = {"rbac.authorization.kubernetes.io/autoupdate": "true"}
    meta = {"labels": labels, "annotations": annotations}
    return [
        ("clusterroles", {"metadata": {"name": "cluster-admin", **meta}, "rules": [
            {"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]},
            {"nonResourceURLs": ["*"], "verbs": ["*"]}]}),
        ("clusterrolebindings", {"metadata": {"name": "cluster-admin", **meta},
                                 "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                             "name": "cluster-admin"},
                                 "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group",
                                               "name": MASTERS}]}),
    ]


def install_defaults(store) -> None:
    """Create the default ClusterRole and binding unless present (idempotent, after a restore too)."""
    for plural, obj in default_cluster_roles():
        if not store.exists(f"{RBAC}/{plural}", None, obj["metadata"]["name"]):
            store.create(f"{RBAC}/{plural}", None, obj, field_manager="kube-apiserver")
