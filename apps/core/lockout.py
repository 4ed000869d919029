"""Sign-in lockout with django-axes: the authentication backend and the answer to a locked-out attempt.

The answer is the same whether or not the username exists, and names no user: it says that sign-in is
paused and for how long.
"""

from __future__ import annotations

from axes.backends import AxesStandaloneBackend
from django.conf import settings
from django.shortcuts import render


class LockoutBackend(AxesStandaloneBackend):
    """Refuses sign-in while the username or the client is locked out.

    Only HTTP sign-ins are counted; a call without a request (Django's test client `login()`, a shell) has
    no client to count, and is left to the next backend instead of failing.
    """

    def authenticate(self, request=None, username=None, password=None, **kwargs):
        if request is None:
            return None
        return super().authenticate(request, username=username, password=password, **kwargs)


def locked_out(request, credentials=None, *args, **kwargs):
    """429 with the sign-in page and a message that does not say which of user or client is locked out."""
    minutes = int(settings.AXES_COOLOFF_TIME.total_seconds() // 60)
    response = render(request, "web/locked_out.html", {"minutes": minutes}, status=429)
    response["Retry-After"] = str(int(settings.AXES_COOLOFF_TIME.total_seconds()))
    return response
