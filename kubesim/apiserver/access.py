"""Authentication and authorization of API requests, and the review and token APIs.

Who is asking:
- `Authorization: Bearer <server --token>`: the cluster admin (`kubesim-admin`, group `system:masters`);
- `Authorization: Bearer <ServiceAccount token>`: `system:serviceaccount:<ns>:<name>` with the groups the
  apiserver gives service accounts. Tokens are JWTs kubesim signs (HS256 with a key of the running server;
  upstream signs RS256): from the TokenRequest API (`kubectl create token NAME`, `python -m kubesim token`),
  valid until they expire or the ServiceAccount is deleted or re-created;
- no credentials: the admin, unless the server requires `--token` (then 401, as before);
- `Impersonate-User` / `Impersonate-Group` headers (`kubectl --as`), if the caller may impersonate.

What they may do: with `authorization="rbac"` every request is decided by `kubesim.apiserver.rbac` and a
denial is 403 Forbidden in the apiserver's words; the default ("open") lets every authenticated request
through. Access reviews (SelfSubjectAccessReview, SubjectAccessReview, LocalSubjectAccessReview) always
answer from RBAC, so `kubectl auth can-i` tells what a cluster enforcing RBAC would decide.
"""

from __future__ import annotations

import json
import secrets
import time
import uuid
from datetime import UTC, datetime

import jwt
from aiohttp import web

from . import rbac
from .errors import ApiError
from .rbac import ADMIN, User

ISSUER = "https://kubernetes.default.svc.cluster.local"
API_AUDIENCE = ISSUER
DEFAULT_EXPIRATION_SECONDS = 3600
MIN_EXPIRATION_SECONDS = 600
USER_KEY = web.RequestKey("kubesim.user", User)  # request[USER_KEY] set for every authenticated request
MODES = ("open", "rbac")
AUTHZ = "/apis/authorization.k8s.io/v1"


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _json(body: dict, status: int = 201) -> web.Response:
    return web.Response(body=json.dumps(body).encode(), status=status, content_type="application/json")


async def _body(request: web.Request) -> dict:
    try:
        body = json.loads(await request.read() or b"{}")
    except ValueError:
        raise ApiError.bad_request("the body of the request could not be decoded as JSON") from None
    if not isinstance(body, dict):
        raise ApiError.bad_request("the body of the request must be a JSON object")
    return body


class Access:
    """Authenticates requests, enforces RBAC when asked, issues and verifies ServiceAccount tokens."""

    def __init__(self, store, *, mode: str = "open", admin_token: str | None = None):
        if mode not in MODES:
            raise ValueError(f"authorization mode must be one of {', '.join(MODES)}, not {mode!r}")
        self.store = store
        self.mode = mode
        self.admin_token = admin_token
        self.authorizer = rbac.Authorizer(store)
        self._key = secrets.token_bytes(32)

    # ------------------------------------------------------------------ tokens

    def issue(self, namespace: str, name: str, audiences: list[str] | None = None,
              expiration_seconds: int = DEFAULT_EXPIRATION_SECONDS) -> tuple[str, float]:
        """A token for an existing ServiceAccount and its expiry (epoch seconds); 404 when it does not exist."""
        sa = self.store.get("v1/serviceaccounts", namespace, name)
        now = int(time.time())
        claims = {
            "aud": audiences or [API_AUDIENCE], "iss": ISSUER, "iat": now, "nbf": now,
            "exp": now + expiration_seconds, "jti": str(uuid.uuid4()),
            "sub": f"{rbac.SA_PREFIX}{namespace}:{name}",
            "kubernetes.io": {"namespace": namespace,
                              "serviceaccount": {"name": name, "uid": sa["metadata"]["uid"]}},
        }
        return jwt.encode(claims, self._key, algorithm="HS256"), float(now + expiration_seconds)

    def _verify(self, token: str) -> User:
        try:
            claims = jwt.decode(token, self._key, algorithms=["HS256"], audience=API_AUDIENCE, issuer=ISSUER)
            info = claims["kubernetes.io"]
            namespace, name, uid = info["namespace"], info["serviceaccount"]["name"], info["serviceaccount"]["uid"]
        except (jwt.PyJWTError, KeyError, TypeError):
            raise ApiError.unauthorized() from None
        try:
            sa = self.store.get("v1/serviceaccounts", namespace, name)
        except ApiError:
            raise ApiError.unauthorized() from None
        if sa["metadata"].get("uid") != uid:
            raise ApiError.unauthorized()
        return rbac.service_account_user(namespace, name, uid)

    def authenticate(self, request: web.Request) -> User:
        header = request.headers.get("Authorization", "")
        if not header:
            if self.admin_token:
                raise ApiError.unauthorized()
            return ADMIN
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token:
            raise ApiError.unauthorized()
        if self.admin_token and secrets.compare_digest(token, self.admin_token):
            return ADMIN
        return self._verify(token.strip())

    def impersonate(self, request: web.Request, user: User) -> User:
        """The user named by Impersonate-* headers, if `user` may impersonate them (403 otherwise)."""
        target = request.headers.get("Impersonate-User")
        groups = request.headers.getall("Impersonate-Group", [])
        if not target:
            if groups:
                raise ApiError.bad_request("requested impersonation of groups without a user")
            return user
        wanted = User(target)
        checks = []
        sa = wanted.service_account
        if sa is not None:
            checks.append(rbac.Attributes(verb="impersonate", namespace=sa[0], resource="serviceaccounts",
                                          name=sa[1]))
        else:
            checks.append(rbac.Attributes(verb="impersonate", resource="users", name=target))
        checks.extend(rbac.Attributes(verb="impersonate", resource="groups", name=g) for g in groups)
        for attrs in checks:
            if not self.authorizer.decide(user, attrs)[0]:
                raise rbac.forbidden(user, attrs)
        if sa is not None:
            base = rbac.service_account_user(*sa)
            return User(base.name, (*base.groups, *[g for g in groups if g not in base.groups]))
        return User(target, (*groups, *([rbac.AUTHENTICATED] if rbac.AUTHENTICATED not in groups else [])))

    # ------------------------------------------------------------------ middleware

    @web.middleware
    async def middleware(self, request: web.Request, handler):
        user = self.impersonate(request, self.authenticate(request))
        request[USER_KEY] = user
        if self.mode == "rbac":
            self.authorize(user, rbac.request_attributes(request.method, request.path, request.query))
        return await handler(request)

    def authorize(self, user: User, attrs: rbac.Attributes) -> None:
        """Refuse (403) what RBAC does not allow under `--authorization rbac`: HTTP requests and, through
        their client, the cluster's own components alike."""
        if self.mode == "rbac" and not self.authorizer.decide(user, attrs)[0]:
            raise rbac.forbidden(user, attrs)

    # ------------------------------------------------------------------ APIs

    def routes(self) -> list[tuple[str, str, object]]:
        return [
            ("POST", f"{AUTHZ}/selfsubjectaccessreviews", self.self_subject_access_review),
            ("POST", f"{AUTHZ}/subjectaccessreviews", self.subject_access_review),
            ("POST", f"{AUTHZ}/namespaces/{{namespace}}/localsubjectaccessreviews", self.local_subject_access_review),
            ("POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews", self.self_subject_review),
            ("POST", "/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token", self.token_request),
        ]

    def _review(self, kind: str, body: dict, user: User, namespace: str | None = None) -> web.Response:
        spec = body.get("spec") if isinstance(body.get("spec"), dict) else {}
        attrs = rbac.review_attributes(spec)
        if namespace is not None:
            if attrs.namespace and attrs.namespace != namespace:
                raise ApiError.bad_request(f"spec.resourceAttributes.namespace must match namespace: {namespace}")
            attrs.namespace = namespace
        allowed, reason = self.authorizer.decide(user, attrs)
        status = {"allowed": allowed}
        if reason:
            status["reason"] = reason
        meta = {"creationTimestamp": None}
        if namespace is not None:
            meta["namespace"] = namespace
        return _json({"kind": kind, "apiVersion": "authorization.k8s.io/v1", "metadata": meta, "spec": spec,
                      "status": status})

    async def self_subject_access_review(self, request: web.Request) -> web.Response:
        return self._review("SelfSubjectAccessReview", await _body(request), request[USER_KEY])

    @staticmethod
    def _subject(spec: dict) -> User:
        if not spec.get("user") and not spec.get("groups"):
            raise ApiError.invalid("SubjectAccessReview", "SubjectAccessReview.authorization.k8s.io", "",
                                   "authorization.k8s.io", [{
                                       "reason": "FieldValueInvalid", "field": "spec.user",
                                       "message": 'Invalid value: "": at least one of user or group must be '
                                                  "specified"}])
        return User(spec.get("user") or "", tuple(spec.get("groups") or ()), spec.get("uid") or "")

    async def subject_access_review(self, request: web.Request) -> web.Response:
        body = await _body(request)
        return self._review("SubjectAccessReview", body, self._subject(body.get("spec") or {}))

    async def local_subject_access_review(self, request: web.Request) -> web.Response:
        body = await _body(request)
        return self._review("LocalSubjectAccessReview", body, self._subject(body.get("spec") or {}),
                            request.match_info["namespace"])

    async def self_subject_review(self, request: web.Request) -> web.Response:
        user: User = request[USER_KEY]
        info = {"username": user.name, "groups": list(user.groups)}
        if user.uid:
            info["uid"] = user.uid
        return _json({"kind": "SelfSubjectReview", "apiVersion": "authentication.k8s.io/v1",
                      "metadata": {"creationTimestamp": None}, "status": {"userInfo": info}})

    async def token_request(self, request: web.Request) -> web.Response:
        namespace, name = request.match_info["namespace"], request.match_info["name"]
        body = await _body(request)
        spec = body.get("spec") if isinstance(body.get("spec"), dict) else {}
        seconds = spec.get("expirationSeconds") or DEFAULT_EXPIRATION_SECONDS
        if not isinstance(seconds, int) or seconds < MIN_EXPIRATION_SECONDS:
            raise ApiError.invalid("TokenRequest", "TokenRequest.authentication.k8s.io", name, "authentication.k8s.io",
                                   [{"reason": "FieldValueInvalid", "field": "spec.expirationSeconds",
                                     "message": f"Invalid value: {seconds}: may not specify a duration less than "
                                                "10 minutes"}])
        audiences = list(spec.get("audiences") or []) or [API_AUDIENCE]
        token, expires = self.issue(namespace, name, audiences, seconds)
        return _json({
            "kind": "TokenRequest", "apiVersion": "authentication.k8s.io/v1",
            "metadata": {"name": name, "namespace": namespace, "creationTimestamp": _iso(time.time())},
            "spec": {"audiences": audiences, "expirationSeconds": seconds,
                     "boundObjectRef": spec.get("boundObjectRef")},
            "status": {"token": token, "expirationTimestamp": _iso(expires)},
        })
