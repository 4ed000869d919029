"""Vocabularies of tenancy."""

from django.db import models


class Role(models.TextChoices):
    OWNER = "owner", "Owner"
    OPERATOR = "operator", "Operator"
    VIEWER = "viewer", "Viewer"


# Roles allowed to change a tenant's services, tokens and private catalog entries.
WRITER_ROLES = frozenset({Role.OWNER, Role.OPERATOR})
