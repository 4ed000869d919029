"""Rendered objects as text: YAML (multi-document, long scripts as literal blocks) or a JSON List."""

from __future__ import annotations

import json

import yaml


class _Dumper(yaml.SafeDumper):
    def ignore_aliases(self, data) -> bool:  # every document stands alone: no &anchors / *aliases
        return True


def _str(dumper: yaml.SafeDumper, value: str):
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def to_yaml(objects: list[dict]) -> str:
    """Multi-document YAML in the objects' order, keys in the order they were rendered."""
    return yaml.dump_all(objects, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=110)


def to_json(objects: list[dict]) -> str:
    """A Kubernetes `List` of the objects (what `kubectl apply -f` accepts)."""
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}, indent=2)
