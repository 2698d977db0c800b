"""Serve plotly.js from the installed ``plotly`` package as a static file.

The dashboard must work on machines with no internet, and vendoring a 4 MB minified file
into the repository would drift from the Python package that builds the figures. This finder
exposes the package's own copy as ``vendor/plotly.min.js``; ``collectstatic`` and whitenoise
pick it up like any other static file.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, Literal, overload

import plotly
from django.contrib.staticfiles.finders import BaseFinder
from django.core.files.storage import FileSystemStorage

PLOTLY_FILE = "plotly.min.js"
PREFIX = "vendor"
STATIC_PATH = f"{PREFIX}/{PLOTLY_FILE}"


def package_data_dir() -> Path:
    """The ``package_data`` folder of the installed plotly (holds plotly.min.js)."""
    return Path(plotly.__file__).resolve().parent / "package_data"


class PlotlyJsFinder(BaseFinder):
    """A staticfiles finder with exactly one file: ``vendor/plotly.min.js``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.storage = FileSystemStorage(location=str(package_data_dir()))
        self.storage.prefix = PREFIX  # type: ignore[attr-defined]

    @overload
    def find(self, path: str, find_all: Literal[False] = False) -> str | None: ...

    @overload
    def find(self, path: str, find_all: Literal[True]) -> list[str]: ...

    def find(self, path: str, find_all: bool = False, **kwargs: Any) -> str | list[str] | None:
        """Absolute path of plotly.min.js for its static path, else nothing."""
        many = find_all or bool(kwargs.get("all"))  # ``all`` is Django < 6's old spelling
        found = [str(package_data_dir() / PLOTLY_FILE)] if path == STATIC_PATH else []
        if many:
            return found
        return found[0] if found else None

    def list(
        self, ignore_patterns: Iterable[str] | None
    ) -> Iterator[tuple[str, FileSystemStorage]]:
        """The one file, relative to the storage (the prefix is added by collectstatic)."""
        yield PLOTLY_FILE, self.storage
