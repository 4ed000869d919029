"""API throttling: one budget per API token (per user for browser sessions), one per client address for
anonymous requests (the schema). Over budget is 429 with Retry-After. Rates come from settings
(API_THROTTLE_RATES) when a request is checked, so they can be changed without touching the classes."""

from __future__ import annotations

from django.conf import settings
from rest_framework.throttling import SimpleRateThrottle


class _SettingsRateThrottle(SimpleRateThrottle):
    def get_rate(self):
        return settings.API_THROTTLE_RATES.get(self.scope)


class TokenRateThrottle(_SettingsRateThrottle):
    """Each token has its own budget, so one busy automation does not starve its owner's other tokens."""

    scope = "user"

    def get_cache_key(self, request, view):
        if not request.user or not request.user.is_authenticated:
            return None
        token_id = getattr(request.auth, "pk", None)
        ident = f"token-{token_id}" if token_id is not None else f"user-{request.user.pk}"
        return self.cache_format % {"scope": self.scope, "ident": ident}


class AnonymousRateThrottle(_SettingsRateThrottle):
    scope = "anon"

    def get_cache_key(self, request, view):
        if request.user and request.user.is_authenticated:
            return None
        return self.cache_format % {"scope": self.scope, "ident": self.get_ident(request)}
