"""Vocabularies of the audit log."""

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
