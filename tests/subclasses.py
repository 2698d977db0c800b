"""Every subclass of a base class that a package defines, found after importing each of the
package's modules: how the API and query tests check "every schema" and "every query"
without a list that could fall behind the code."""

from __future__ import annotations

import importlib
import pkgutil
from types import ModuleType
from typing import TypeVar

T = TypeVar("T")


def subclasses_in(package: ModuleType, base: type[T]) -> list[type[T]]:
    """Every subclass of ``base``, however deep, defined under ``package``."""
    for module in pkgutil.iter_modules(package.__path__):
        importlib.import_module(f"{package.__name__}.{module.name}")
    found: list[type[T]] = []
    pending = list(base.__subclasses__())
    while pending:
        cls = pending.pop()
        found.append(cls)
        pending.extend(cls.__subclasses__())
    return [cls for cls in found if cls.__module__.startswith(package.__name__)]
