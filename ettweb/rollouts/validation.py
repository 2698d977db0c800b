"""Validating and storing rollouts: the one set of rules the API, the forms and the admin share.

Every check names the field it refuses (``component: unknown component 'ckpt' (known: ...)``),
so a deploy pipeline's log line says what to fix.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

from ettweb.platform.text import http_link, unstorable
from ettweb.rollouts.models import Rollout
from ettweb.rollouts.scope import Scope, ScopeError, parse_scope

MAX_NAME_CHARS: Final = 200
MAX_NOTES_CHARS: Final = 10_000
MAX_LINK_CHARS: Final = 500


class RolloutInvalid(ValueError):
    """A rollout field that cannot be stored; ``str`` is ``<field>: <problem>``."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}")
        self.field = field
        self.problem = problem


@dataclass(frozen=True)
class RolloutFields:
    """A rollout's fields after every check: ready to store."""

    name: str
    component: str
    at: datetime
    scope: Scope
    notes: str = ""
    link: str = ""


def _name(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise RolloutInvalid("name", "must not be empty")
    name = value.strip()
    if len(name) > MAX_NAME_CHARS:
        raise RolloutInvalid("name", f"at most {MAX_NAME_CHARS} characters")
    _storable("name", name)
    return name


def _storable(field: str, text: str) -> None:
    problem = unstorable(text)
    if problem:
        raise RolloutInvalid(field, problem)


def _component(value: Any, known: Sequence[str]) -> str:
    if not isinstance(value, str) or not value.strip():
        raise RolloutInvalid("component", "must not be empty")
    name = value.strip()
    if name not in known:
        shown = ", ".join(known)
        raise RolloutInvalid("component", f"unknown component {name!r} (known: {shown}; "
                                          "owners add components in the admin)")
    return name


def _at(value: Any) -> datetime:
    """A timezone-aware UTC datetime; a naive one is read as UTC (the spec's timestamps are)."""
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
        except ValueError as exc:
            raise RolloutInvalid("at", f"not an ISO 8601 timestamp: {value!r}") from exc
    if not isinstance(value, datetime):
        raise RolloutInvalid("at", "must be a timestamp, e.g. 2026-10-12T09:30:00Z")
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    at = value.astimezone(UTC)
    if not 2000 <= at.year <= 2100:
        raise RolloutInvalid("at", f"year {at.year} is outside 2000-2100")
    return at


def _notes(value: Any) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise RolloutInvalid("notes", "must be text")
    if len(value) > MAX_NOTES_CHARS:
        raise RolloutInvalid("notes", f"at most {MAX_NOTES_CHARS} characters")
    _storable("notes", value)
    return value.strip()


def _link(value: Any) -> str:
    """Empty, or an http(s) URL (:func:`http_link`), at most ``MAX_LINK_CHARS``."""
    if value is None or value == "":
        return ""
    if not isinstance(value, str):
        raise RolloutInvalid("link", "must be a URL")
    _storable("link", value)
    link = http_link(value)
    if not link:
        raise RolloutInvalid("link", "must be an http:// or https:// URL")
    if len(link) > MAX_LINK_CHARS:
        raise RolloutInvalid("link", f"at most {MAX_LINK_CHARS} characters")
    return link


def _scope(value: Any) -> Scope:
    try:
        return parse_scope({} if value is None else value)
    except ScopeError as exc:
        raise RolloutInvalid(f"scope.{exc.field}", exc.problem) from exc


class RolloutProblems(RolloutInvalid):
    """Every field that cannot be stored: a form shows each beside its input at once,
    rather than one per submission. ``str`` and ``field`` are the first problem's, so a
    caller that wants one line (the API) still gets ``<field>: <problem>``."""

    def __init__(self, problems: list[RolloutInvalid]) -> None:
        super().__init__(problems[0].field, problems[0].problem)
        self.problems = problems


def clean_rollout(data: Mapping[str, Any], known_components: Sequence[str]) -> RolloutFields:
    """Every field checked, in the order a person reads them; raises
    :class:`RolloutProblems` naming every field that fails."""
    checks: dict[str, Any] = {
        "name": lambda: _name(data.get("name")),
        "component": lambda: _component(data.get("component"), known_components),
        "at": lambda: _at(data.get("at")), "scope": lambda: _scope(data.get("scope")),
        "notes": lambda: _notes(data.get("notes")), "link": lambda: _link(data.get("link"))}
    values: dict[str, Any] = {}
    problems: list[RolloutInvalid] = []
    for name, check in checks.items():
        try:
            values[name] = check()
        except RolloutInvalid as exc:
            problems.append(exc)
    if problems:
        raise RolloutProblems(problems)
    return RolloutFields(**values)


def save_rollout(fields: RolloutFields, *, rollout: Rollout | None = None,
                 created_by: Any = None) -> Rollout:
    """Store new ``fields`` (or overwrite ``rollout``'s); the creator is kept on edits."""
    target = rollout or Rollout(created_by=created_by)
    target.name, target.component, target.at = fields.name, fields.component, fields.at
    target.scope, target.notes, target.link = fields.scope.as_dict(), fields.notes, fields.link
    target.save()
    return target


