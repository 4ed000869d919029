"""`manage.py model_agent_manifest --image IMAGE [--format yaml|json]`: print the model agent's objects for real
clusters (ServiceAccount, ClusterRole and binding, its claim on the shared cluster cache, the DaemonSet running
`python -m workers.modelagent` in IMAGE, the control plane's own image) to apply with `kubectl apply -f -`. Its plan
(the ConfigMap `controlplane/model-agent`) is written by the control plane's inventory pass. With `--cluster NAME`,
refused for a cluster whose node model volume is "none": its engine pods read no node copies."""

from __future__ import annotations

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from apps.catalog.registries import parse_pinned_image
from apps.serving.rendering.modelagent import agent_objects
from apps.serving.rendering.output import to_json, to_yaml


class Command(BaseCommand):
    help = "Print the model agent's Kubernetes objects (needs PLATFORM_MODEL_CACHE)."

    def add_arguments(self, parser):
        parser.add_argument("--image", required=True, help="the control plane's image, pinned (name:tag or @digest)")
        parser.add_argument("--format", choices=("yaml", "json"), default="yaml")
        parser.add_argument("--cluster", default="", help="the registered cluster it is for (checks its node model "
                                                          "volume)")

    def handle(self, *args, image: str, format: str = "yaml", cluster: str = "", **options):
        from apps.clusters.models import Cluster

        if cluster:
            found = Cluster.objects.filter(name=cluster).first()
            if found is None:
                raise CommandError(f"No cluster named {cluster}.")
            if not found.reads_node_copies:
                raise CommandError(f"{cluster}'s node model volume is \"none\": its engine pods read no node copies, "
                                   "so the agent would copy for nothing. Set it to hostPath or csi first.")
        try:
            objects = agent_objects(parse_pinned_image(image, "--image"), settings.PLATFORM_MODEL_CACHE)
        except ValueError as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(to_json(objects) if format == "json" else to_yaml(objects))
