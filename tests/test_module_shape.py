"""Every module in the product's packages does one job a reader can hold: at most 500 lines
and a docstring that opens it saying what it is for (issue 29). The attribution engine's sweep
is the one exception: it is one algorithm, and splitting it would scatter its invariants.

Migrations are generated, so they are left out.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("ettweb", "collector", "trainer")
MAX_LINES = 500
#: One algorithm kept whole on purpose (docs/explanation: attribution).
ALLOWED_LONGER = {"ettweb/attribution/engine.py"}


def _modules() -> list[Path]:
    return sorted(path for package in PACKAGES for path in (ROOT / package).rglob("*.py")
                  if "migrations" not in path.parts)


def _name(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def test_the_walk_finds_the_packages() -> None:
    names = {_name(path) for path in _modules()}
    assert {"ettweb/attribution/engine.py", "collector/schema.py", "trainer/__main__.py"} <= names
    assert len(names) > 100


@pytest.mark.parametrize("path", _modules(), ids=_name)
def test_a_module_is_short_and_says_what_it_is_for(path: Path) -> None:
    text = path.read_text()
    lines = text.count("\n")
    if _name(path) not in ALLOWED_LONGER:
        assert lines <= MAX_LINES, f"{_name(path)} has {lines} lines (at most {MAX_LINES})"
    if path.name == "__init__.py" and not text.strip():
        return  # an empty package marker has nothing to say
    assert ast.get_docstring(ast.parse(text)), f"{_name(path)} opens with no docstring"
