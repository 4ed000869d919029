"""The Celery app. Configuration comes from Django settings (`CELERY_*`); tasks live in `workers.tasks`.

Apps enqueue through this app by task name (`controlplane.tasknames`), so they never import `workers/`.
"""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")

app = Celery("controlplane")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks(["workers"], related_name="tasks")
