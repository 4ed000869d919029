"""Template helpers of the portal: an audit entry's changes in people's words (apps/core/audit_display.py)."""

from django import template

from apps.core.audit_display import Change, describe_changes

register = template.Library()


@register.filter
def audit_changes(entry) -> list[Change]:
    return describe_changes(entry)
