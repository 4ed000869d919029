"""Serve browser libraries that ship inside Python packages, so no npm step or committed copy is needed."""

from __future__ import annotations

from pathlib import Path

from django.contrib.staticfiles.finders import BaseFinder
from django.core.files.storage import FileSystemStorage

PREFIX = "vendor"


def _plotly_dir() -> Path:
    import plotly

    return Path(plotly.__file__).parent / "package_data"


VENDORED = {"plotly.min.js": _plotly_dir}


class VendorFinder(BaseFinder):
    """Find `vendor/<file>` in installed packages (Plotly's charting bundle)."""

    def check(self, **kwargs):
        return []

    def find(self, path, find_all=False, **kwargs):
        find_all = find_all or kwargs.get("all", False)
        prefix, _, name = path.partition("/")
        directory = VENDORED.get(name) if prefix == PREFIX else None
        match = str(directory() / name) if directory and (directory() / name).exists() else None
        if find_all:
            return [match] if match else []
        return match

    def list(self, ignore_patterns):
        for name, directory in VENDORED.items():
            storage = FileSystemStorage(location=str(directory()))
            storage.prefix = PREFIX
            yield name, storage
