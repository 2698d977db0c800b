"""A page's own GET filters and same-page links, read from its HTML.

Why from the page: a page's parameters beyond the ones the bench knows by name (selects,
number ranges, hidden inputs, sorts, pages) are whatever its forms and links offer, so a
filter added to a page later is exercised too, with values the page itself proposes.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace
from html.parser import HTMLParser
from urllib.parse import parse_qsl

from bench.dashboard_stages.discovery import Param


class PageForms(HTMLParser):
    """A page's own GET forms (their fields) and its same-page links (``?sort=…``).

    Only forms that submit to the page itself (no ``action``, or ``action`` is the path) and
    by GET; POST forms (edits) and forms elsewhere (a top bar's search) are someone else's.
    """

    def __init__(self, path: str) -> None:
        super().__init__()
        self.path = path
        self.params: dict[str, Param] = {}
        self.links: list[dict[str, str]] = []
        self.lists: dict[str, list[str]] = defaultdict(list)
        self._in_form = False
        self._select: str | None = None
        self._options: list[str] = []
        self._datalist: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag == "form":
            self._in_form = (a.get("method", "get").lower() == "get"
                             and a.get("action", "") in ("", self.path, "."))
        elif tag == "a" and a.get("href", "").startswith("?"):
            query = dict(parse_qsl(a["href"][1:]))
            if "format" not in query:
                self.links.append(query)
        elif tag == "datalist":
            self._datalist = a.get("id", "")
        elif tag == "option":
            self._option(a)
        elif self._in_form and a.get("name"):
            self._field(tag, a)

    def _option(self, a: dict[str, str]) -> None:
        if self._select is not None:
            self._options.append(a.get("value", ""))
        elif self._datalist is not None and a.get("value"):
            self.lists[self._datalist].append(a["value"])

    def _field(self, tag: str, a: dict[str, str]) -> None:
        name, kind = a["name"], a.get("type", "text")
        if tag == "select":
            self._select, self._options = name, []
        elif tag == "input" and kind == "hidden":
            self.params[name] = Param(name, value=a.get("value", ""))
        elif tag == "input" and kind in ("checkbox", "radio"):
            known = self.params.get(name)
            values = (*(known.choices if known else ()), a.get("value") or "on")
            self.params[name] = Param(name, kind="bool", choices=values)
        elif tag == "input" and kind not in ("submit", "button", "reset"):
            self.params[name] = Param(
                name, kind={"number": "int", "date": "date"}.get(kind, "str"),
                choices=(f"@{a['list']}",) if a.get("list") else (),
                minimum=int(a["min"]) if a.get("min", "").lstrip("-").isdigit() else None,
                maximum=int(a["max"]) if a.get("max", "").lstrip("-").isdigit() else None)

    def handle_endtag(self, tag: str) -> None:
        if tag == "form":
            self._in_form = False
        elif tag == "select" and self._select is not None:
            options = tuple(v for v in self._options if v)
            self.params[self._select] = Param(self._select, choices=options)
            self._select = None
        elif tag == "datalist":
            self._datalist = None

    def resolved(self) -> list[Param]:
        """The fields, datalist references replaced by the list's values."""
        return [replace(p, choices=tuple(self.lists.get(p.choices[0][1:], ())))
                if p.choices[:1] and p.choices[0].startswith("@") else p
                for p in self.params.values()]
