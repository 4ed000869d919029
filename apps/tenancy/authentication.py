"""`Authorization: Bearer <token>` for automation. Unknown, expired or revoked tokens get 401."""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import authentication, exceptions

from apps.tenancy.models import ApiToken, hash_token

# Writing last_used_at on every request would turn reads into writes; once a minute is enough.
LAST_USED_RESOLUTION = timedelta(minutes=1)


class BearerTokenAuthentication(authentication.BaseAuthentication):
    keyword = "Bearer"

    def authenticate(self, request):
        header = authentication.get_authorization_header(request).split()
        if not header or header[0].lower() != self.keyword.lower().encode():
            return None
        if len(header) != 2:
            raise exceptions.AuthenticationFailed("Invalid bearer header: expected 'Bearer <token>'.")
        try:
            plaintext = header[1].decode()
        except UnicodeError as exc:
            raise exceptions.AuthenticationFailed("Invalid token.") from exc
        token = ApiToken.objects.select_related("user").filter(key_hash=hash_token(plaintext)).first()
        if token is None or not token.user.is_active:
            raise exceptions.AuthenticationFailed("Invalid token.")
        if token.is_revoked:
            raise exceptions.AuthenticationFailed("Token revoked.")
        if token.is_expired:
            raise exceptions.AuthenticationFailed("Token expired.")
        now = timezone.now()
        if token.last_used_at is None or now - token.last_used_at > LAST_USED_RESOLUTION:
            ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
        user = token.user
        user.token_tenant_id = token.tenant_id
        return user, token

    def authenticate_header(self, request):
        return self.keyword


class BearerTokenScheme(OpenApiAuthenticationExtension):
    target_class = "apps.tenancy.authentication.BearerTokenAuthentication"
    name = "bearerAuth"

    def get_security_definition(self, auto_schema):
        return {"type": "http", "scheme": "bearer"}
