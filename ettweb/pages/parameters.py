"""The GET parameters a page takes, and the 400 it answers for any other or a bad value.

Why: a form reads the fields it has and ignores the rest, so ``/fleet/?teem=ads`` showed the
whole fleet under a URL that reads as team ``ads``'s. A page names what it takes by its
forms (their fields are its inputs) and a few plain names (``moved`` after a redirect);
``tests/ettweb/test_filter_walk.py`` checks that every page says, so a page added later cannot
forget. A value its form refuses is a 400 too, naming the parameter and what it takes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from functools import wraps
from typing import Any, TypeVar, cast

from django import forms
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest
from django.http.response import HttpResponseBase

View = TypeVar("View", bound=Callable[..., HttpResponseBase])
#: The attribute a checked view carries: what it takes (the URL walk reads it).
TAKES = "ett_parameters"


def names_of(sources: Iterable[type[forms.Form] | str]) -> frozenset[str]:
    """Every field of the forms and every plain name given."""
    names: set[str] = set()
    for source in sources:
        names.update([source] if isinstance(source, str) else source.base_fields)
    return frozenset(names)


def unknown_reason(unknown: Iterable[str], known: Iterable[str], where: str = "page") -> str:
    """``teem: unknown parameter (this page takes cluster, …)``: the pages' refusal (after
    ``bad parameters: ``) and the API's (``where="endpoint"``) in the same words."""
    names = sorted(unknown)
    takes = ", ".join(sorted(known)) or "no parameters"
    noun = "unknown parameter" if len(names) == 1 else "unknown parameters"
    return f"{', '.join(names)}: {noun} (this {where} takes {takes})"


def takes(*sources: type[forms.Form] | str) -> Callable[[View], View]:
    """Refuse a request whose query string names anything outside ``sources`` (a form's
    fields, or a plain parameter name), whatever its method: a form posted back to its own
    URL keeps the query string it was opened with."""
    known = names_of(sources)

    def decorate(view: View) -> View:
        @wraps(view)
        def checked(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
            unknown = set(request.GET) - known
            if unknown:
                return HttpResponseBadRequest(f"bad parameters: {unknown_reason(unknown, known)}",
                                              content_type="text/plain")
            return view(request, *args, **kwargs)

        setattr(checked, TAKES, known)
        return cast(View, checked)

    return decorate


def accepts(field: forms.Field) -> str:
    """What a field takes, in words, for a refusal to say (empty when its error says it)."""
    if isinstance(field, forms.ChoiceField):
        choices: Iterable[tuple[Any, Any]] = field.choices  # type: ignore[assignment]
        values = [str(value) for value, _ in choices if value != ""]
        return f" (one of {', '.join(values)})" if values else ""
    return ""


def form_reason(form: forms.Form) -> str:
    """All errors on one line, each naming its parameter and what it takes: what a 400
    response says. Errors of the whole form (an inverted range) name their parameters in
    their own words, so they get no label of their own."""
    parts = []
    for name, errors in form.errors.items():
        text = " ".join(str(e) for e in errors)
        if name == "__all__":
            parts.append(text)
        else:
            parts.append(f"{name}: {text}{accepts(form.fields[name])}")
    return "; ".join(parts)


def bad_parameters(form: forms.Form) -> HttpResponse:
    """The 400 every page answers for bad GET parameters: ``bad parameters: <reasons>``."""
    return HttpResponseBadRequest(f"bad parameters: {form_reason(form)}",
                                  content_type="text/plain")
