"""Template helpers of the portal: an audit entry's changes as (field, before, after) rows."""

from django import template

register = template.Library()
QUIET = frozenset({"updated", "created", "version", "last_used_at", "key_hash"})


@register.filter
def audit_changes(entry) -> list[tuple[str, object, object]]:
    """The fields an entry changed (creation: every field set; deletion: every field it had)."""
    before, after = entry.before or {}, entry.after or {}
    keys = sorted(k for k in set(before) | set(after) if k not in QUIET and before.get(k) != after.get(k))
    return [(k, before.get(k, "–") if entry.before is not None else "–",
             after.get(k, "–") if entry.after is not None else "–") for k in keys]
