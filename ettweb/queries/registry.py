"""How a query finds its runner: ``calculate(query)`` for every query, typed by its result.

Each query is a frozen dataclass deriving ``Query[ItsResult]``; its runner class is
decorated ``@runner_for(ItsQuery)``. ``calculate(SomeQuery(...))`` is then typed ``SomeResult``
and runs ``SomeQueryRunner``, with no table of queries to keep in step: a query module
registers its own runner when it is imported, which it must be before one of its queries
can exist.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, ClassVar, Generic, Protocol, TypeVar

ResultT_co = TypeVar("ResultT_co", covariant=True)
ResultT = TypeVar("ResultT")
RunnerT = TypeVar("RunnerT", bound="type[QueryRunner[Any]]")


class QueryRunner(Protocol[ResultT_co]):
    """What a runner is: made from its query, it calculates the result."""

    def __init__(self, query: Any, /) -> None: ...

    def calculate(self) -> ResultT_co: ...


class Query(Generic[ResultT_co]):
    """The base of every query: ``ResultT_co`` is what :func:`calculate` answers for it.

    No fields, so each query stays the frozen dataclass it declares (hashable: equal queries
    share a memoised result).
    """

    __slots__ = ()
    #: The runner ``@runner_for`` registered for this query class.
    runner: ClassVar[type[QueryRunner[Any]]]


def runner_for(query: type[Query[Any]]) -> Callable[[RunnerT], RunnerT]:
    """Class decorator: the decorated runner is the one :func:`calculate` uses for
    ``query``. A second runner for the same query is a mistake, and refused."""

    def register(runner: RunnerT) -> RunnerT:
        if "runner" in vars(query):
            raise TypeError(f"{query.__name__} already runs with {query.runner.__name__}")
        query.runner = runner
        return runner

    return register


def run(query: Query[ResultT]) -> ResultT:
    """``query``'s result from its runner, outside any memo."""
    runner = vars(type(query)).get("runner")
    if runner is None:
        raise TypeError(f"{type(query).__name__} has no runner (decorate one @runner_for(...))")
    result: ResultT = runner(query).calculate()
    return result


def calculate(query: Query[ResultT]) -> ResultT:
    """Run any query with its runner: what views, the API and reports call.

    Inside :func:`memoized` (one GET request: ``QueryMemoMiddleware``) an equal query is run
    once: the fleet page's tiles, charts and tables ask for the same lost time and lifecycle
    more than once, and each is a scan of the per-day rows. A query that cannot be hashed
    (one holding a dict) is simply run.
    """
    memo = _MEMO.get()
    if memo is None:
        return run(query)
    try:
        result: ResultT = memo[query]
        return result
    except KeyError:
        result = memo[query] = run(query)
        return result
    except TypeError:  # unhashable
        return run(query)


_MEMO: ContextVar[dict[Any, Any] | None] = ContextVar("ett_query_memo", default=None)


@contextmanager
def memoized() -> Iterator[None]:
    """Equal queries share one result until the block ends. Why only in a block: results
    are snapshots, so a memo must not outlive the one read-only request that asked."""
    token = _MEMO.set({})
    try:
        yield
    finally:
        _MEMO.reset(token)
