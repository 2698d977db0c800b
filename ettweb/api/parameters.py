"""The query parameters an API operation takes: any other is a 400 naming it.

Why: django-ninja ignores query parameters an operation does not declare, so
``/api/v1/fleet/summary?teem=ads`` answered 200 with the whole fleet's numbers, which a deploy
pipeline reads as the answer for team ``ads``. Each operation's own pydantic query models say
what it takes (the same ones its OpenAPI document is built from), so the list cannot drift
from the signature, and an endpoint added later is covered without a line of its own.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any

from django.http import HttpRequest, HttpResponseBase
from ninja.operation import Operation
from ninja.params.models import QueryModel

from ettweb.pages.parameters import unknown_reason

Run = Callable[..., HttpResponseBase]


def query_names(operation: Operation) -> frozenset[str]:
    """Every query parameter ``operation`` declares (a ``Query[Schema]``'s fields included,
    as ninja flattens them into the URL)."""
    names: set[str] = set()
    for model in operation.models:
        if not issubclass(model, QueryModel):
            continue
        flat = getattr(model, "__ninja_flatten_map__", None)
        names.update(flat if flat else (field.alias or name
                                        for name, field in model.model_fields.items()))
    return frozenset(names)


def refuse_unknown_parameters(run: Run) -> Run:
    """A ninja ``view`` decorator (``api.add_decorator(..., mode="view")``): ninja hands it
    each operation's bound ``run``, so the operation, and with it what it declares, is
    ``run.__self__``. The refusal is the API's own ``{"error": ...}`` 400."""
    operation: Operation = run.__self__  # type: ignore[attr-defined]
    known = query_names(operation)

    @wraps(run)
    def checked(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        unknown = set(request.GET) - known
        if unknown:
            return operation.api.create_response(
                request, {"error": unknown_reason(unknown, known, "endpoint")}, status=400)
        return run(request, *args, **kwargs)

    return checked
