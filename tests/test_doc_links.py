"""Every relative link in README.md and docs/ resolves: to a file of the repository, and, with
a #fragment, to a heading of that file (as GitHub makes its anchors). A page moved or a heading
renamed otherwise leaves a reader at a dead end."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md")])
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)


def anchors(path: Path) -> set[str]:
    """GitHub's anchors: each heading lower-cased, punctuation dropped, spaces to hyphens."""
    text = FENCE.sub("", path.read_text())
    found: set[str] = set()
    for heading in re.findall(r"^#+\s+(.+?)\s*$", text, re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower().replace("`", "")).replace(" ", "-")
        found.add(slug)
    return found


def links(path: Path) -> list[str]:
    return [target for target in LINK.findall(FENCE.sub("", path.read_text()))
            if not re.match(r"[a-z]+:", target)]


@pytest.mark.parametrize("doc", DOCS, ids=[str(d.relative_to(ROOT)) for d in DOCS])
def test_every_relative_link_resolves(doc: Path) -> None:
    dead = []
    for target in links(doc):
        file_part, _, fragment = target.partition("#")
        resolved = (doc.parent / file_part).resolve() if file_part else doc
        if not resolved.exists():
            dead.append(f"{target}: no such file")
        elif fragment and resolved.suffix == ".md" and fragment not in anchors(resolved):
            dead.append(f"{target}: no heading #{fragment}")
    assert not dead, dead


def test_every_doc_is_reachable_from_the_readme() -> None:
    seen, queue = {ROOT / "README.md"}, [ROOT / "README.md"]
    while queue:
        doc = queue.pop()
        for target in links(doc):
            file_part = target.partition("#")[0]
            resolved = (doc.parent / file_part).resolve() if file_part else doc
            if resolved.suffix == ".md" and resolved.exists() and resolved not in seen:
                seen.add(resolved)
                queue.append(resolved)
    unreachable = [str(d.relative_to(ROOT)) for d in DOCS if d not in seen]
    assert not unreachable
