"""bench.dashboard: its fleet keeps the simulator's numbers, it reads a page's own filters, and
a quick run measures every page and endpoint the app serves (no speed asserted)."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from collections.abc import Iterator
from datetime import date
from pathlib import Path
from typing import Any

import pytest
from django.db import connection
from django.urls import URLPattern, URLResolver, get_resolver

from bench.dashboard import parse_args
from bench.dashboard_stages.catalog import Catalog, Filler
from bench.dashboard_stages.discovery import Param
from bench.dashboard_stages.fleet import FLEET_VERSION, ranks_cap, with_ranks
from bench.dashboard_stages.forms import PageForms
from bench.dashboard_stages.timing import query_for
from collector.schema import validate_event
from ettweb.attribution.engine import attribute_job
from ettweb.simulate.events import job_events
from ettweb.simulate.fleet import FleetPlan
from ettweb.simulate.rollout_plan import rollout_schedule

ROOT = Path(__file__).resolve().parents[2]
#: URL namespaces whose every page the bench must time.
DASHBOARD_NAMESPACES = ("dashboard", "rollouts", "components", "reports")


def test_ranks_add_events_but_change_no_number() -> None:
    plan = FleetPlan(seed=3, days=30, jobs=12, end=date(2026, 11, 30))
    schedule = rollout_schedule(plan)
    for index in range(plan.jobs):
        events = job_events(plan, index, schedule)
        ranked = with_ranks(events, 5, random.Random(index))
        assert len(ranked) > 2 * len(events)
        assert {e["rank"] for e in ranked} == set(range(5))
        alone = attribute_job([validate_event(e) for e in events])
        together = attribute_job([validate_event(e) for e in ranked])
        assert together.ett_pct == pytest.approx(alone.ett_pct, abs=1e-9)
        assert together.wall_gpu_s == pytest.approx(alone.wall_gpu_s, rel=1e-12)
        assert together.lost_s == pytest.approx(alone.lost_s, rel=1e-9)


def test_ranks_cap_is_the_fewest_ranks_that_reach_the_target() -> None:
    counts = [(50, 40, 8), (50, 40, 1), (50, 40, 64)]  # (rank-0 events, repeated, GPUs)
    assert ranks_cap(counts, 150) == 1
    assert ranks_cap(counts, 151) == 2  # 150 + 40 + 40 (the 1-GPU job has one rank)
    assert ranks_cap(counts, 150 + 2 * 40 * 7) == 8
    assert ranks_cap(counts, 150 + 40 * 7 + 40 * 8) == 9  # past 8 only the 64-GPU job grows


PAGE = """
<form method="get" action="" id="filters">
  <input type="date" name="date_from"><input type="date" name="date_to">
  <input type="text" name="team" list="teams"><datalist id="teams"><option value="ads">
  <option value="feed"></datalist>
  <select name="interval"><option value="">any</option><option value="day">d</option>
    <option value="week">w</option></select>
  <input type="number" name="silent_after" min="1" max="10080">
  <input type="checkbox" name="compare" value="previous">
  <input type="hidden" name="sort" value="-ett_pct">
  <input type="text" name="mystery"><button type="submit">Show</button>
</form>
<form method="post"><input name="owner_team"></form>
<form method="get" action="/elsewhere/"><input name="q"></form>
<a href="?sort=gpus&amp;page=2">GPUs</a> <a href="?format=csv&amp;table=x">CSV</a>
<a href="/other/?page=3">other</a>
"""


def test_page_forms_reads_the_page_own_get_filters_and_links() -> None:
    forms = PageForms("/fleet/")
    forms.feed(PAGE)
    params = {p.name: p for p in forms.resolved()}
    assert set(params) == {"date_from", "date_to", "team", "interval", "silent_after",
                           "compare", "sort", "mystery"}
    assert params["team"].choices == ("ads", "feed")  # the datalist's values
    assert params["interval"].choices == ("day", "week")
    assert (params["silent_after"].kind, params["silent_after"].minimum,
            params["silent_after"].maximum) == ("int", 1, 10080)
    assert params["compare"].choices == ("previous",) and params["date_to"].kind == "date"
    assert params["sort"].value == "-ett_pct"
    assert forms.links == [{"sort": "gpus", "page": "2"}]  # same page, no export


def _catalog() -> Catalog:
    return Catalog(jobs=("job-a", "job-b"), biggest_job="job-b", rollouts=((7, 1.7e9),),
                   components=("checkpointing", "pt2_compiler"), models=("m",), teams=("t",),
                   clusters=("c",), sources=("node-1",), first_day=date(2026, 6, 1),
                   last_day=date(2026, 11, 30), unsubscribe_token="tok")


def test_query_for_fills_required_parameters_and_both_ends_of_a_range() -> None:
    filler = Filler(_catalog())
    params = [Param("date_from", required=True, kind="date"),
              Param("date_to", required=True, kind="date"), Param("week", required=True),
              Param("mystery")]
    for seed in range(40):
        query = query_for(params, filler, random.Random(seed))
        low, high = date.fromisoformat(query["date_from"]), date.fromisoformat(query["date_to"])
        assert date(2026, 6, 1) <= low <= high <= date(2026, 11, 30)
        assert query["week"] in filler.catalog.weeks
        assert "mystery" not in query  # unknown and optional: left out, never guessed
    assert filler.path_value("components/<path:name>/", "name", random.Random(0)) in (
        "checkpointing", "pt2_compiler")
    assert filler.path_value("phases/<str:name>/", "name", random.Random(0)) is None


def test_a_hidden_input_is_varied_only_with_the_pages_own_link_values() -> None:
    # /rollouts/ keeps its sort in a hidden input; the job list's sorts (-gpus) are a 400 there.
    filler = Filler(_catalog())
    assert "-gpus" in filler.choices["sort"]
    params = [Param("sort", value="-at")]
    links = [{"sort": "at"}, {"sort": "-ett_change", "verdict": "helped"}]
    sent = {query_for(params, filler, random.Random(seed), links)["sort"] for seed in range(60)}
    assert sent == {"-at", "at", "-ett_change"}
    alone = {query_for(params, filler, random.Random(seed))["sort"] for seed in range(20)}
    assert alone == {"-at"}


def test_quick_and_refused_arguments(capsys: pytest.CaptureFixture[str]) -> None:
    quick = parse_args(["--quick"])
    assert (quick.jobs, quick.days, quick.database) == (300, 30, "ett_bench_dashboard_quick")
    assert parse_args([]).events == 5_000_000 and FLEET_VERSION >= 1
    with pytest.raises(SystemExit):
        parse_args(["--database", "x; DROP TABLE"])
    assert "--database" in capsys.readouterr().err


# --------------------------------------------------------------------------- end to end

def _bench(*args: str) -> dict[str, Any]:
    proc = subprocess.run([sys.executable, "-m", "bench.dashboard", "--quick", *args],
                          cwd=ROOT, env=dict(os.environ), capture_output=True, text=True,
                          timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


@pytest.fixture
def database(django_db_blocker: Any) -> Iterator[str]:
    """A database name of this test's own, dropped whatever happens."""
    name = f"ett_bench_dashboard_t{os.getpid()}"
    yield name
    with django_db_blocker.unblock(), connection.cursor() as cursor:
        cursor.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def _named_pages() -> set[str]:
    names = set()
    for item in get_resolver().url_patterns:
        if isinstance(item, URLResolver) and item.namespace in DASHBOARD_NAMESPACES:
            names |= {f"{item.namespace}:{p.name}" for p in item.url_patterns
                      if isinstance(p, URLPattern)}
    return names


def _api_gets() -> set[str]:
    from ettweb.api.v1 import api

    return {f"GET {path}" for path, ops in api.get_openapi_schema()["paths"].items()
            if "get" in ops}


@pytest.mark.integration
@pytest.mark.timeout(1200)
def test_a_quick_run_measures_every_page_and_endpoint(database: str) -> None:
    result = _bench("--database", database, "--repeats", "3")
    assert result["events"] >= result["events_target"] == 30_000
    assert result["jobs"] >= 290 and result["days"] == 30 and result["reused"] is False
    assert result["rollouts"] == 14 and result["quarantined_lines"] > 0
    assert result["collectors"] >= 3 and result["load_s"] > 0
    assert result["unmeasured"] == [], result["unmeasured"]
    assert {row["prefix"] for row in result["excluded"]} == {"/admin/", "/accounts/"}
    pages, endpoints = result["pages"], result["endpoints"]
    assert _named_pages() <= {row["name"] for row in pages.values()}
    assert set(endpoints) == _api_gets()
    for key, row in {**pages, **endpoints}.items():
        assert row["requests"] == 3 and row["errors"] == 0, (key, row["error_samples"])
        assert 0 <= row["p50_ms"] <= row["p95_ms"] <= row["max_ms"], key
        assert row["meets_target"] == (row["p95_ms"] <= result["target_p95_ms"]), key
        assert row["stored_ms"] > 0 and row["representative"].startswith("/"), key
    raw = [row for row in {**pages, **endpoints}.values() if row["raw_scope"]]
    assert {"dashboard:fleet", "dashboard:jobs", "dashboard:job"} <= {r["name"] for r in raw}
    for row in raw:  # the raw path computes the numbers the rollups hold
        assert row["raw_ms"] > 0 and row["raw_events"] > 0 and row["ratio"] > 0
        assert row["raw_ett_pct"] == pytest.approx(row["stored_ett_pct"], abs=1e-3)
    assert pages["/collectors/"]["raw_scope"] is None
    assert isinstance(result["meets_target"], bool)

    again = _bench("--database", database, "--repeats", "1", "--drop")
    assert again["reused"] is True and again["loaded_at"] == result["loaded_at"]
    assert again["events"] == result["events"]
