"""Rendered objects as text: YAML (multi-document, long scripts as literal blocks) or a JSON List."""

from __future__ import annotations

import json
import re

import yaml


class _Dumper(yaml.SafeDumper):
    def ignore_aliases(self, data) -> bool:  # every document stands alone: no &anchors / *aliases
        return True


# Plain scalars that PyYAML (YAML 1.1) writes unquoted but that other YAML readers take for numbers or
# booleans: kubectl's Go YAML reads a hash such as `8746e32785045900` as a float and `y`/`n` as booleans,
# and then refuses the object ("cannot unmarshal number into ... annotations of type string").
_NOT_A_PLAIN_STRING = re.compile(
    r"[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)?"
    r"|0[xX][0-9a-fA-F_]+|0[oO][0-7_]+|0[bB][01_]+|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN)|[yYnN]"
)


def _str(dumper: yaml.SafeDumper, value: str):
    if "\n" in value:
        style = "|"
    elif _NOT_A_PLAIN_STRING.fullmatch(value):
        style = "'"
    else:
        style = None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def to_yaml(objects: list[dict]) -> str:
    """Multi-document YAML in the objects' order, keys in the order they were rendered."""
    return yaml.dump_all(objects, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=110)


def to_json(objects: list[dict]) -> str:
    """A Kubernetes `List` of the objects (what `kubectl apply -f` accepts)."""
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}, indent=2)
