"""The property tests' example counts: whole in ``make test``, a fraction in the loop."""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from types import ModuleType

import pytest

import tests.examples


def reloaded(monkeypatch: pytest.MonkeyPatch, value: str | None) -> ModuleType:
    if value is None:
        monkeypatch.delenv("ETT_TEST_EXAMPLES", raising=False)
    else:
        monkeypatch.setenv("ETT_TEST_EXAMPLES", value)
    return importlib.reload(tests.examples)


@pytest.fixture(autouse=True)
def restore(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    yield
    monkeypatch.undo()
    importlib.reload(tests.examples)


def test_the_whole_suite_draws_every_example(monkeypatch: pytest.MonkeyPatch) -> None:
    module = reloaded(monkeypatch, None)
    assert [module.examples(n) for n in (5, 100, 1500)] == [5, 100, 1500]


def test_the_loop_draws_a_fraction_never_below_the_floor(monkeypatch: pytest.MonkeyPatch
                                                         ) -> None:
    module = reloaded(monkeypatch, "0.2")
    assert [module.examples(n) for n in (5, 60, 100, 1500)] == [5, 20, 20, 300]


@pytest.mark.parametrize("value", ["fast", "0", "1.5", "-0.2"])
def test_a_bad_fraction_is_refused_by_name(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    with pytest.raises(ValueError, match="ETT_TEST_EXAMPLES must be a fraction"):
        reloaded(monkeypatch, value)
