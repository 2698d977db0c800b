"""A rollout's scope: which jobs it reached (ETT_SPEC §6). Pure Python, no Django.

A scope is the whole fleet (``{}``) or any of ``models``, ``teams``, ``clusters`` (non-empty
lists of exact values) and ``job_pattern`` (a shell-style glob on the job id). A job is in
scope when it matches every field given (fields AND, values within a field OR). A field given
with no values is an error, never the fleet: a deploy pipeline that sent ``"teams": []`` by
mistake must hear about it rather than claim the whole fleet's numbers.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from ettweb.platform.text import unstorable

LIST_FIELDS: Final = ("models", "teams", "clusters")
PATTERN_FIELD: Final = "job_pattern"
FIELDS: Final = (*LIST_FIELDS, PATTERN_FIELD)
#: Longest value accepted in a scope (job ids and labels are at most 200 characters).
MAX_VALUE_CHARS: Final = 200
#: Most values in one list: a scope naming thousands of models is a job list, not a rollout.
MAX_VALUES: Final = 1000


class ScopeError(ValueError):
    """A scope that cannot be used; the message names the field."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"scope.{field}: {problem}")
        self.field = field
        self.problem = problem


@dataclass(frozen=True)
class Scope:
    """A validated scope; ``None`` for a field means "not given" (matches every job)."""

    models: tuple[str, ...] | None = None
    teams: tuple[str, ...] | None = None
    clusters: tuple[str, ...] | None = None
    job_pattern: str | None = None

    @property
    def is_fleet(self) -> bool:
        """A fleet-wide rollout (no field given): it has no control group."""
        return all(getattr(self, name) is None for name in FIELDS)

    def label_lists(self) -> list[tuple[str, tuple[str, ...]]]:
        """(job label, the values it must take) for each list the scope gives: ``model``,
        ``team``, ``cluster`` as the job rollups and the label sums name them."""
        return [(name[:-1], values) for name in LIST_FIELDS
                if (values := getattr(self, name)) is not None]

    def matches(self, job: str, model: str, team: str, cluster: str) -> bool:
        """Whether a job with these labels (its rollup's) is in scope."""
        for values, label in ((self.models, model), (self.teams, team),
                              (self.clusters, cluster)):
            if values is not None and label not in values:
                return False
        return self.job_pattern is None or self._regex().match(job) is not None

    def _regex(self) -> re.Pattern[str]:
        assert self.job_pattern is not None
        return _compiled(self.job_pattern)

    def as_dict(self) -> dict[str, Any]:
        """The JSON form, given fields only (``{}`` for the fleet)."""
        out: dict[str, Any] = {}
        for name in LIST_FIELDS:
            values = getattr(self, name)
            if values is not None:
                out[name] = list(values)
        if self.job_pattern is not None:
            out[PATTERN_FIELD] = self.job_pattern
        return out

    def describe(self) -> str:
        """``teams ads, feed · job_pattern ads-*`` — or ``whole fleet``."""
        parts = [f"{name} {', '.join(getattr(self, name))}" for name in LIST_FIELDS
                 if getattr(self, name) is not None]
        if self.job_pattern is not None:
            parts.append(f"{PATTERN_FIELD} {self.job_pattern}")
        return " · ".join(parts) or "whole fleet"


_PATTERNS: dict[str, re.Pattern[str]] = {}


def _compiled(pattern: str) -> re.Pattern[str]:
    """fnmatch's glob as a compiled regex, case-sensitive on every OS (job ids are)."""
    regex = _PATTERNS.get(pattern)
    if regex is None:
        regex = _PATTERNS[pattern] = re.compile(fnmatch.translate(pattern))
    return regex


def _value(field: str, value: Any) -> str:
    if not isinstance(value, str):
        raise ScopeError(field, f"values must be strings, not {type(value).__name__}")
    if not value:
        raise ScopeError(field, "values must not be empty strings")
    if len(value) > MAX_VALUE_CHARS:
        raise ScopeError(field, f"values must be at most {MAX_VALUE_CHARS} characters")
    problem = unstorable(value)
    if problem:
        raise ScopeError(field, f"a value {problem}")
    return value


def _values(field: str, raw: Any) -> tuple[str, ...]:
    if not isinstance(raw, list | tuple):
        raise ScopeError(field, f"must be a list of strings, not {type(raw).__name__}")
    if not raw:
        raise ScopeError(field, "given with no values (leave the field out for every job)")
    if len(raw) > MAX_VALUES:
        raise ScopeError(field, f"at most {MAX_VALUES} values")
    return tuple(dict.fromkeys(_value(field, item) for item in raw))  # order kept, no repeats


def parse_scope(raw: Any) -> Scope:
    """A :class:`Scope` from its JSON form; raises :class:`ScopeError` naming the field."""
    if raw is None:
        return Scope()
    if not isinstance(raw, Mapping):
        raise ScopeError("(scope)", f"must be an object, not {type(raw).__name__}")
    unknown = sorted(str(key) for key in raw if key not in FIELDS)
    if unknown:
        raise ScopeError(unknown[0], f"unknown field (allowed: {', '.join(FIELDS)})")
    lists = {name: _values(name, raw[name]) for name in LIST_FIELDS if name in raw}
    pattern = None
    if PATTERN_FIELD in raw:
        pattern = _value(PATTERN_FIELD, raw[PATTERN_FIELD])
    return Scope(job_pattern=pattern, **lists)
