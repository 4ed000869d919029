"""An audit entry's changes in people's words: the one rendering behind the service page's "Changes to
this service", the portal's Audit page and the admin's history.

- related objects by name, not id (`model: Llama 3.1 8B → Mistral 7B`; a since-deleted one as `#3 (deleted)`);
- booleans as yes/no, choices by their label, nothing as a dash;
- nested settings as key paths (`engine_settings.max_model_len: 8192 → 16384`); lists of dicts keyed by
  their role or name (`pools[engine].replicas: 1 → 2`), lists of values comma-separated.

Snapshots (apps/core/audit.py) store ids, so names are read when an entry is shown: they are the objects'
current names.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.core.exceptions import FieldDoesNotExist

# Bookkeeping fields that change on every write and say nothing to a reader.
QUIET = frozenset({"updated", "created", "version", "last_used_at", "key_hash"})
ABSENT = "–"
NOTHING = frozenset({ABSENT, "none"})  # a change from nothing to nothing (an empty field deleted) is not shown
_MISSING = object()


@dataclass(frozen=True)
class Change:
    path: str
    before: str
    after: str


def flatten(value: Any, prefix: str) -> dict[str, Any]:
    """{key path: leaf value}; an empty dict or list is a leaf of its own."""
    if isinstance(value, dict) and value:
        out: dict[str, Any] = {}
        for key, item in value.items():
            out.update(flatten(item, f"{prefix}.{key}"))
        return out
    if isinstance(value, list) and value and all(isinstance(item, dict) for item in value):
        out = {}
        for index, item in enumerate(value):
            key = item.get("role") or item.get("name") or index
            rest = {k: v for k, v in item.items() if not (k in ("role", "name") and v == key)}
            out.update(flatten(rest, f"{prefix}[{key}]") if rest else {f"{prefix}[{key}]": "present"})
        return out
    return {prefix: value}


def words(value: Any) -> str:
    """A leaf value as a person reads it."""
    if value is _MISSING or value is None or value == "":
        return ABSENT
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list):
        return ", ".join(words(v) for v in value) if value else "none"
    if isinstance(value, dict):
        return "none"
    return str(value)


def _field(model, name: str):
    try:
        return model._meta.get_field(name) if model is not None else None
    except FieldDoesNotExist:
        return None


def _namer(model, name: str):
    """A function turning a stored value of top-level field `name` into words, or None for plain `words`."""
    field = _field(model, name)
    if field is None:
        return None
    if field.is_relation and (field.many_to_one or field.one_to_one or field.many_to_many):
        related = field.related_model

        def names(value):
            ids = value if isinstance(value, list) else [value]
            ids = [i for i in ids if i not in (None, "")]
            if not ids:
                return "none" if isinstance(value, list) else ABSENT
            found = {o.pk: str(o) for o in related._default_manager.filter(pk__in=ids)}
            return ", ".join(found.get(i, f"#{i} (deleted)") for i in ids)
        return names
    if getattr(field, "choices", None):
        labels = {str(k): str(v) for k, v in field.flatchoices}
        return lambda value: labels.get(str(value), words(value)) if value not in (None, "") else ABSENT
    return None


def describe_changes(entry) -> list[Change]:
    """What an entry changed, path by path (creation: every value set; deletion: every value it had)."""
    model = entry.content_type.model_class() if entry.content_type_id else None
    sides = []
    for snap in (entry.before, entry.after):
        flat: dict[str, Any] = {}
        for key, value in (snap or {}).items():
            if key not in QUIET:
                flat.update(flatten(value, key))
        sides.append(flat)
    before, after = sides
    out = []
    for path in sorted(set(before) | set(after)):
        old, new = before.get(path, _MISSING), after.get(path, _MISSING)
        if old == new:
            continue
        namer = _namer(model, path) if "." not in path and "[" not in path else None
        show = namer or words
        change = Change(path, ABSENT if old is _MISSING else show(old), ABSENT if new is _MISSING else show(new))
        if change.before != change.after and not {change.before, change.after} <= NOTHING:
            out.append(change)
    return out
