"""One read-only request calculates each distinct query once (``ettweb.queries.memoized``,
``QueryMemoMiddleware``); outside a request, and in requests that may write, every
``calculate()`` runs its query."""

from __future__ import annotations

from datetime import date

import pytest
from django.db import connection
from django.http import HttpRequest, HttpResponse
from django.test import RequestFactory
from django.test.utils import CaptureQueriesContext

from ettweb.queries import _MEMO as MEMO
from ettweb.queries import DateRange, JobQuery, LostByComponentQuery, calculate, memoized
from ettweb.queries.memo_middleware import QueryMemoMiddleware

pytestmark = pytest.mark.django_db
MARCH = DateRange(date(2026, 3, 1), date(2026, 3, 31))


def queries_run(block: object) -> int:
    with CaptureQueriesContext(connection) as captured:
        block()  # type: ignore[operator]
    return len(captured.captured_queries)


def test_an_equal_query_is_run_once_inside_the_memo() -> None:
    with memoized():
        first = queries_run(lambda: calculate(LostByComponentQuery(MARCH)))
        again = queries_run(lambda: calculate(LostByComponentQuery(MARCH)))
        other = queries_run(lambda: calculate(LostByComponentQuery(DateRange(
            date(2026, 3, 1), date(2026, 3, 30)))))
    assert first > 0 and again == 0 and other > 0
    outside = queries_run(lambda: calculate(LostByComponentQuery(MARCH)))
    assert outside == first  # the memo ended with its block


def test_a_query_holding_a_dict_is_run_every_time() -> None:
    query = JobQuery("nojob", components={"compile": "pt2_compiler"})
    with memoized():
        assert calculate(query) is None
        assert queries_run(lambda: calculate(query)) > 0


@pytest.mark.parametrize(("method", "memo"), [("get", True), ("head", True), ("post", False)])
def test_only_read_only_requests_share_results(method: str, memo: bool) -> None:
    seen: list[bool] = []

    def view(request: HttpRequest) -> HttpResponse:
        seen.append(MEMO.get() is not None)
        return HttpResponse("ok")

    request = getattr(RequestFactory(), method)("/fleet/")
    assert QueryMemoMiddleware(view)(request).status_code == 200
    assert seen == [memo] and MEMO.get() is None
