"""Templates keep the seams the import contracts keep for Python (pyproject.toml).

A feature's templates include or extend only its own templates, the project's (``base.html``,
the error pages) and the shared pieces in ``ettweb/pages/templates/pages/``; they load only
Django's built-in libraries and the shared ones in ``ettweb/pages/templatetags/``. A template
reaching into another feature's folder would tie the two features as tightly as an import, and
no import-linter contract sees it.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
APPS = ROOT / "ettweb"
#: Libraries any template may load: Django's own, and what ettweb.pages shares.
SHARED_LIBRARIES = {"static", "i18n", "l10n", "tz", "cache"} | {
    p.stem for p in (APPS / "pages" / "templatetags").glob("*.py") if p.stem != "__init__"}
#: A feature may load its own tags (ettweb/<app>/templatetags/<name>.py) as well.
REFERENCE = re.compile(r"{%\s*(include|extends)\s+[\"']([^\"']+)[\"']")
LOAD = re.compile(r"{%\s*load\s+([^%]+?)\s*%}")


def feature_templates() -> list[tuple[str, Path]]:
    """Every template an app ships, with the app's name (the shared ``pages`` app excluded)."""
    found = []
    for app in sorted(p for p in APPS.iterdir() if (p / "templates").is_dir()):
        if app.name in ("pages", "templates"):
            continue
        found += [(app.name, path) for path in sorted((app / "templates").rglob("*.html"))]
    return found


def project_templates() -> set[str]:
    base = APPS / "templates"
    return {str(p.relative_to(base)) for p in base.rglob("*.html")}


def reference_problems(app: str, text: str) -> list[str]:
    """Includes and extends of another feature's templates, and loads of its tag libraries."""
    own_tags = {p.stem for p in (APPS / app / "templatetags").glob("*.py")}
    problems = []
    for _, name in REFERENCE.findall(text):
        if not (name.startswith((f"{app}/", "pages/")) or name in project_templates()):
            problems.append(f"uses {name}")
    for libraries in LOAD.findall(text):
        for library in libraries.split():
            if library not in SHARED_LIBRARIES | own_tags:
                problems.append(f"loads {library}")
    return problems


@pytest.mark.parametrize(("app", "path"), feature_templates(),
                         ids=lambda v: v if isinstance(v, str) else v.name)
def test_a_feature_template_uses_only_its_own_and_shared_pieces(app: str, path: Path) -> None:
    assert reference_problems(app, path.read_text()) == []


def test_the_check_sees_another_features_template_and_tags() -> None:
    text = ('{% load static rollout_format sso %}{% extends "base.html" %}'
            '{% include "dashboard/_job_filters.html" %}{% include "pages/_job_filters.html" %}'
            '{% include "rollouts/takes.html" %}')
    assert reference_problems("rollouts", text) == ["uses dashboard/_job_filters.html",
                                                    "loads sso"]


def test_there_are_templates_to_check() -> None:
    apps = {app for app, _ in feature_templates()}
    assert {"dashboard", "rollouts", "components", "changes", "reports"} <= apps
