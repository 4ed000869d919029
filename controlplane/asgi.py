"""ASGI entry point."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
application = get_asgi_application()

from controlplane.warmup import warm_up  # noqa: E402 - after Django is set up

warm_up()
