"""Vocabularies shared by every app: the audit log and tenant membership roles."""

from django.db import models


class AuditAction(models.TextChoices):
    CREATE = "create", "Create"
    UPDATE = "update", "Update"
    DELETE = "delete", "Delete"


class AuditVia(models.TextChoices):
    ADMIN = "admin", "Admin"
    API = "api", "API"
    COMMAND = "command", "Management command"
    PORTAL = "portal", "Portal"
    SYSTEM = "system", "System"


class Role(models.TextChoices):
    """A member's role in a tenant (the access rules in `apps.core.access` read it)."""

    OWNER = "owner", "Owner"
    OPERATOR = "operator", "Operator"
    VIEWER = "viewer", "Viewer"


# Roles allowed to change a tenant's services, tokens and private catalog entries.
WRITER_ROLES = frozenset({Role.OWNER, Role.OPERATOR})
