"""``/api/v1/``: the JSON API assembled (django-ninja): its auth, its errors, its routers.

One router module per resource: ``rollouts`` (record a rollout, read its impact),
``reports`` (the fleet over any days, the weekly report), ``collectors`` (agents' health),
``job_list`` and ``job_detail`` (the jobs page and one job's), ``fleet`` (the fleet and
component charts), ``changes`` (detected level shifts) and ``collector_check`` (an agent
asks about its credential). Every one answers errors as ``ettweb.api.errors`` words them
and authenticates as ``ettweb.api.auth`` says (a bearer token or the browser's session)
unless it names its own.
"""

from __future__ import annotations

from typing import Any

from ninja import NinjaAPI

from ettweb.api.auth import READERS
from ettweb.api.errors import handle_errors
from ettweb.api.parameters import refuse_unknown_parameters


class EttAPI(NinjaAPI):
    """The API, with its OpenAPI document built once per path prefix.

    Why: django-ninja rebuilds the document from every operation's pydantic models on each
    request, yet it changes only when the code does: every route is registered at import
    time.
    """

    def get_openapi_schema(self, *, path_prefix: str | None = None,
                           path_params: dict[str, Any] | None = None) -> Any:
        if path_prefix is None:
            path_prefix = self.get_root_path(path_params or {})
        cache: dict[str, Any] = self.__dict__.setdefault("_openapi_by_prefix", {})
        if path_prefix not in cache:
            cache[path_prefix] = super().get_openapi_schema(path_prefix=path_prefix)
        return cache[path_prefix]


api = EttAPI(title="ETT API", version="1", urls_namespace="api-v1", auth=READERS,
             description="Rollouts and their measured ETT% impact "
                         "(docs/explanation/rollout-statistics.md), the fleet over any days, "
                         "the weekly report's numbers (docs/how-to/weekly-email.md) and "
                         "the collectors' health.")
# Before any router is bound: every operation, mounted routers' included, refuses a query
# parameter it does not declare (a misspelt filter must not answer the unfiltered numbers).
api.add_decorator(refuse_unknown_parameters, mode="view")
handle_errors(api)

api.add_router("/", "ettweb.api.rollouts.router")  # record rollouts, read their impact
api.add_router("/", "ettweb.api.reports.router")  # the fleet summary, the weekly report
api.add_router("/", "ettweb.api.collectors.router")  # the agents' health, the quarantine
api.add_router("/", "ettweb.api.job_list.router")  # the jobs page's table
api.add_router("/", "ettweb.api.fleet.router")  # the fleet and component charts' JSON
api.add_router("/", "ettweb.api.job_detail.router")  # one job's page as JSON
api.add_router("/", "ettweb.api.changes.router")  # detected changes (ETT_SPEC §6.3)
api.add_router("/", "ettweb.api.collector_check.router")  # a collector asks about its credential
