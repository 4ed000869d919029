"""Shared pieces every domain app uses: encrypted fields, audit, base models."""
