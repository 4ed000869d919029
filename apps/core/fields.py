"""A text field encrypted at rest with Fernet; keys come from settings.FIELD_ENCRYPTION_KEYS.

The first key encrypts, every key decrypts (MultiFernet), so keys rotate by prepending a new one.
Values are decrypted only when read from the database; nothing here logs them.
"""

from __future__ import annotations

from functools import lru_cache

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import models


@lru_cache(maxsize=4)
def _fernet_for(keys: tuple[str, ...]) -> MultiFernet:
    if not keys:
        raise ImproperlyConfigured("Set FIELD_ENCRYPTION_KEY to encrypt secrets at rest.")
    return MultiFernet([Fernet(key.encode()) for key in keys])


def fernet() -> MultiFernet:
    """The MultiFernet built from the configured keys (cached per key set)."""
    return _fernet_for(tuple(settings.FIELD_ENCRYPTION_KEYS))


def encrypt(value: str) -> str:
    return fernet().encrypt(value.encode()).decode()


def decrypt(token: str) -> str:
    try:
        return fernet().decrypt(token.encode()).decode()
    except InvalidToken as exc:
        # The message names no value: a wrong key must not leak the ciphertext into logs.
        raise ImproperlyConfigured(
            "An encrypted field cannot be decrypted with FIELD_ENCRYPTION_KEYS."
        ) from exc


class EncryptedTextField(models.TextField):
    """Text stored as a Fernet token; empty stays empty so "not set" is visible without decrypting."""

    description = "Text encrypted at rest"
    redacted = True

    def from_db_value(self, value, expression, connection):
        if value is None or value == "":
            return value
        return decrypt(value)

    def get_prep_value(self, value):
        value = super().get_prep_value(value)
        if value is None or value == "":
            return value
        return encrypt(value)
