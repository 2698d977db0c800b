"""``/jobs/<job>/`` reads stored rows only: timeline and rank lanes per chunk, the lost-time
waterfall, recoveries with their parts, repeated steps per attempt, CSV of its tables."""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

import plotly.graph_objects as go
import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from ettweb.attribution import chunk_refresh
from ettweb.attribution.engine import attribute_job
from ettweb.dashboard.job_page_figures import MAX_LANE_ATTEMPTS, OPEN_ATTEMPTS, rank_lanes
from ettweb.ingest.batches import ingest_lines
from ettweb.pages.figures import unit_for
from ettweb.platform.colours import colour_of
from ettweb.queries.job_detail import LaneRow
from ettweb.rollups.models import AttemptTimeline, AttributionChunk, JobRollup
from ettweb.rollups.refresh import load_events, refresh_jobs
from tests.ettweb.attribution.attribution_events import Timeline, worked_example
from tests.ettweb.attribution.rank_events import ranked_job, staggered_job
from tests.ettweb.charts import figure_ids, figure_of, traces_of
from tests.ettweb.queued import QueuedTask

pytestmark = pytest.mark.django_db

#: Any statement on the events table or one of its partitions (not ``ingest_eventid``).
EVENTS_TABLE = re.compile(r"\bingest_event(_p\d+|_default)?\b")


@pytest.fixture
def viewer(client: Client) -> Client:
    client.force_login(User.objects.create_user(username="viewer", password="pw-viewer-1"))
    return client


def store(timeline: Timeline) -> None:
    refresh_jobs(ingest_lines(timeline.lines()).jobs)


def page(client: Client, job: str, query: str = "") -> str:
    response = client.get(f"/jobs/{quote(job)}/{query}")
    assert response.status_code == 200, response.content[:300]
    return response.content.decode()


def event_queries(client: Client, job: str, query: str = "") -> list[str]:
    with CaptureQueriesContext(connection) as queries:
        page(client, job, query)
    return [q["sql"] for q in queries.captured_queries if EVENTS_TABLE.search(q["sql"])]


# --------------------------------------------------------------------------- stored rows only

def test_the_page_reads_no_event(viewer: Client) -> None:
    store(ranked_job(64, job="wide", jitter_s=0.3, slow={7}))
    assert event_queries(viewer, "wide") == []
    assert event_queries(viewer, "wide") == []  # and again: nothing cached in between


def test_a_rollup_from_before_the_stored_timeline_is_refreshed_by_the_worker(
        viewer: Client, queued: Callable[[], list[QueuedTask]]) -> None:
    """The page asks the worker once and says the job is being computed; once the worker
    ran the task it was sent, the page reads stored rows only."""
    store(worked_example())
    AttemptTimeline.objects.all().delete()
    AttributionChunk.objects.all().delete()
    JobRollup.objects.filter(job="j1").update(timeline_digest="", chunks=0)
    for _ in range(2):
        html = page(viewer, "j1")
        assert 'id="job-computing"' in html and "Being computed" in html
        assert '<strong id="job-events">12</strong>' in html
        assert "Reload this page in a few seconds" in html
    assert not AttemptTimeline.objects.exists()  # the page wrote nothing
    (task,) = queued()  # once for both views
    assert task == QueuedTask("ett.refresh_outdated_rollups", [["j1"]])
    assert task.run() == 1  # the worker's run
    assert task.run() == 0  # asked again later: nothing left to do
    assert AttemptTimeline.objects.filter(job_id="j1").count() == 2
    assert event_queries(viewer, "j1") == []
    rows = {trace["name"]: trace for trace in traces_of(page(viewer, "j1"), "phase-timeline")}
    assert rows["restart_gap"]["y"] == ["attempt 1"]
    assert queued() == []


def test_a_job_without_a_rollup_is_being_computed(
        viewer: Client, queued: Callable[[], list[QueuedTask]]) -> None:
    """Events stored, no refresh run yet (or events from before rollups): the page says so
    with what ingestion knows, a CSV export is a 503 to retry, and the worker's refresh
    brings the numbers."""
    ingest_lines(worked_example().lines())
    html = page(viewer, "j1")
    assert '<strong id="job-events">12</strong>' in html
    assert "the latest at 1970-01-01 00:18 UTC" in html  # the last attempt_end, 1113 s
    export = viewer.get("/jobs/j1/?format=csv&table=attempts")
    assert export.status_code == 503 and export["Retry-After"] == "5"
    assert export.content.decode().startswith("job 'j1' is being computed")
    assert not JobRollup.objects.exists()
    (task,) = queued()
    task.run()
    html = page(viewer, "j1")
    assert 'id="job-computing"' not in html and 'id="job-ett"' in html
    assert viewer.get("/jobs/j1/?format=csv&table=attempts").status_code == 200
    assert viewer.get("/jobs/nothing-stored/").status_code == 404


# --------------------------------------------------------------------------- what it draws

def test_the_waterfall_goes_from_wall_through_each_category_to_productive(
        viewer: Client) -> None:
    store(worked_example())
    traces = traces_of(page(viewer, "j1"), "lost-waterfall")
    steps = [(t["name"], t["measure"][0], t["x"][0], t.get("base")) for t in traces]
    # §3 worked example, seconds (113 s of wall): largest loss first, names break ties.
    assert steps == [
        ("wall", "absolute", 113.0, None),
        ("repeated_training", "relative", -8.0, 113.0), ("restart_gap", "relative", -7.0, 105.0),
        ("compile", "relative", -6.0, 98.0), ("process_group_init", "relative", -4.0, 92.0),
        ("checkpoint_load", "relative", -3.0, 88.0), ("failure", "relative", -3.0, 85.0),
        ("checkpoint_save", "relative", -2.0, 82.0), ("productive", "absolute", 80.0, None)]
    for trace in traces[1:-1]:
        assert trace["decreasing"]["marker"]["color"] == colour_of(trace["name"])
    assert traces[-1]["totals"]["marker"]["color"] == colour_of("productive")


def test_recoveries_are_stacked_by_their_parts(viewer: Client) -> None:
    store(worked_example())
    html = page(viewer, "j1")
    parts = {t["name"]: (t["y"], t["x"]) for t in traces_of(html, "recovery-parts")}
    assert parts == {"repeated_training": (["after attempt 0"], [8.0]),
                     "failure": (["after attempt 0"], [3.0]),
                     "restart_gap": (["after attempt 0"], [7.0]),
                     "checkpoint_load": (["after attempt 0"], [3.0])}
    assert list(parts)[:3] == ["repeated_training", "failure", "restart_gap"]  # legend order
    assert 'id="recoveries"' in html  # the table stays


def test_the_attempts_table_lists_repeated_steps_per_attempt(viewer: Client) -> None:
    store(worked_example())
    html = page(viewer, "j1")
    table = html[html.index('id="attempts"'):html.index("</table>", html.index('id="attempts"'))]
    cells = [[re.sub(r"<[^>]+>", "", cell).strip()
              for cell in re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)]
             for row in table.split("<tr>")[2:]]
    assert cells == [["0", "failed", "4", "+0.0 s", "1m 23s", "0"],
                     ["1", "completed", "4", "+1m 30s", "23.0 s", "80"]]


def test_each_attempt_has_its_rank_lanes_and_many_lanes_start_folded(viewer: Client) -> None:
    store(staggered_job(10, job="many"))  # ten ranks compiling for ten times: ten lanes
    html = page(viewer, "many")
    assert re.search(r'<details class="rank-lanes" id="lanes-attempt-0">', html)  # folded
    assert re.search(r'<details class="rank-lanes" id="lanes-attempt-1" open>', html)
    assert re.search(r"Attempt 0, [0-9: -]+ UTC to [0-9: -]+ UTC: 10 lanes for 10 ranks", html)
    lanes = figure_of(html, "lanes-0")
    assert lanes["layout"]["yaxis"]["ticktext"] == [f"rank {r}" for r in range(10)]
    compile_bars = next(tr for tr in lanes["data"] if tr["name"] == "compile")
    assert compile_bars["x"] == pytest.approx([(50 + 40 * r) / 60 for r in range(10)])  # min
    train = next(tr for tr in lanes["data"] if tr["name"] == "train")
    assert train["marker"]["color"] == colour_of("productive")
    assert {"lanes-0", "lanes-1", "phase-timeline", "lost-waterfall"} <= set(figure_ids(html))


def test_a_crash_loop_draws_the_lanes_of_its_latest_attempts(viewer: Client) -> None:
    t = Timeline("loop")
    for attempt in range(MAX_LANE_ATTEMPTS + 2):
        t.span(attempt, "model_init", 100 * attempt, 100 * attempt + 40)
        t.mark(attempt, "attempt_end", 100 * attempt + 50, status="failed")
    store(t)
    html = page(viewer, "loop")
    drawn = [i for i in figure_ids(html) if i.startswith("lanes-")]
    assert drawn == [f"lanes-{a}" for a in range(2, MAX_LANE_ATTEMPTS + 2)]
    assert "The lanes of the 2 earliest attempts are not drawn" in html
    # Only the latest attempts start open, however few lanes each has.
    opened = re.findall(r'<details class="rank-lanes" id="lanes-attempt-(\d+)" open>', html)
    last = MAX_LANE_ATTEMPTS + 1
    assert opened == [str(a) for a in range(last - OPEN_ATTEMPTS + 1, last + 1)]


def test_the_lanes_step_through_the_job_one_chunk_at_a_time(
        viewer: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    """Per-rank detail is kept per chunk (15 minutes each once a chunk is full, here past
    10 events): ``lanes_at`` shows the chunk holding that second, with links to the chunks
    before and after it."""
    monkeypatch.setattr(chunk_refresh, "GROUP_EVENTS", 10)
    t = Timeline("long")
    t.mark(0, "attempt_start", 0.0, gpus=2)
    t.span(0, "compile", 0.0, 120.0)
    for minute in range(58):
        for rank in (0, 1):
            t.span(0, "train", 120.0 + 60 * minute, 180.0 + 60 * minute, rank=rank,
                   steps=(10 * minute, 10 * minute + 10))
    t.span(0, "eval", 3600.0, 3660.0, rank=1)
    store(t)
    first = page(viewer, "long")
    assert "step through the job" in first and 'href="?lanes_at=0"' in first
    assert re.search(r"Attempt 0, 1970-01-01 00:00 UTC to 1970-01-01 00:15 UTC", first)
    html = page(viewer, "long", "?lanes_at=2000")  # chunk 2: 30 to 45 minutes
    assert re.search(r"Attempt 0, 1970-01-01 00:30 UTC to 1970-01-01 00:45 UTC", html)
    assert 'href="?lanes_at=900">← earlier' in html and 'href="?lanes_at=2700">later' in html
    lanes = figure_of(html, "lanes-0")
    assert {tr["name"] for tr in lanes["data"]} == {"train"}
    last = page(viewer, "long", "?lanes_at=3601")
    assert {tr["name"] for tr in figure_of(last, "lanes-0")["data"]} == {"eval"}
    assert "later stretch" not in last
    assert event_queries(viewer, "long", "?lanes_at=2000") == []
    bad = viewer.get("/jobs/long/", {"lanes_at": "soon"})
    assert bad.status_code == 400 and b"lanes_at" in bad.content


def test_rank_lanes_are_valid_plotly_json_built_without_plotly_objects() -> None:
    """The lanes figure is plain JSON (a hot path); plotly's own validation accepts it
    unchanged, so skipping that validation at page time hides no mistake."""
    lanes = [LaneRow(0, "0-3, 6", 5, (("model_init", 0.0, 40.0), ("train", 40.0, 100.0)), 1.0),
             LaneRow(0, "4", 1, (("<b>odd</b>", 0.0, 10.0), ("train", 30.0, 100.0)), 1.0)]
    built = rank_lanes(lanes, 0.0, unit_for(100.0), (0.0, 100.0))
    validated = go.Figure(built).to_plotly_json()  # raises on any key plotly does not know
    assert [t["name"] for t in validated["data"]] == [t["name"] for t in built["data"]]
    assert validated["layout"]["yaxis"]["ticktext"] == ["ranks 0-3, 6", "rank 4"]
    assert "&lt;b&gt;odd&lt;/b&gt;" in [t["name"] for t in built["data"]]
    train = next(t for t in validated["data"] if t["name"] == "train")
    assert list(train["base"]) == [40.0, 30.0] and list(train["x"]) == [60.0, 70.0]


def test_the_stored_timeline_equals_the_engines_seconds(viewer: Client) -> None:
    store(ranked_job(16, job="ranked", jitter_s=0.3, seed=2, slow={3}))
    engine = attribute_job(load_events(["ranked"])["ranked"])
    seconds: dict[str, float] = {}
    for trace in traces_of(page(viewer, "ranked"), "phase-timeline"):
        seconds[trace["name"]] = sum(trace["x"]) * 60  # the axis is in minutes
    wanted = {**engine.lost_s, "productive": engine.productive_s}
    assert seconds == pytest.approx(wanted, abs=1e-6)


# --------------------------------------------------------------------------- untrusted names

def test_a_hostile_job_name_is_escaped(viewer: Client) -> None:
    name = '<img src=x onerror="alert(1)">/x&y'
    t = worked_example()
    for event in t.events:
        event["job"] = name
    store(t)
    html = page(viewer, name)
    assert "<img src=x" not in html
    assert "&lt;img src=x onerror=&quot;alert(1)&quot;&gt;/x&amp;y" in html


# --------------------------------------------------------------------------- CSV

def rows_of(response: Any) -> list[list[str]]:
    assert response.status_code == 200 and response["Content-Type"].startswith("text/csv")
    return list(csv.reader(io.StringIO(response.content.decode())))


def test_the_tables_export_as_csv_with_formulas_neutralized(viewer: Client) -> None:
    name = "=HYPERLINK(\"http://x\")"
    t = worked_example()
    for event in t.events:
        event["job"] = name
    store(t)
    url = f"/jobs/{quote(name)}/"
    attempts = rows_of(viewer.get(url, {"format": "csv", "table": "attempts"}))
    assert attempts[0] == ["job", "attempt", "status", "gpus", "start_utc", "end_utc",
                           "duration_s", "repeated_steps"]
    assert [row[0] for row in attempts[1:]] == ["'" + name] * 2
    assert [(row[1], row[2], row[-1]) for row in attempts[1:]] == [("0", "failed", "0"),
                                                                    ("1", "completed", "80")]
    assert attempts[1][4] == "1970-01-01T00:16:40+00:00"
    recoveries = rows_of(viewer.get(url, {"format": "csv", "table": "recoveries"}))
    assert recoveries[0] == ["job", "failed_attempt", "start_utc", "end_utc",
                             "time_to_recover_s", "checkpoint_load_s", "failure_s",
                             "repeated_training_s", "restart_gap_s"]
    assert recoveries[1][0] == "'" + name and recoveries[1][4:] == ["21.0", "3.0", "3.0", "8.0",
                                                                    "7.0"]


@pytest.mark.parametrize(("query", "reason"), [
    ({"format": "csv", "table": "lanes"}, "table: must be one of attempts, recoveries"),
    ({"format": "csv"}, "table: must be one of attempts, recoveries"),
    ({"format": "xlsx", "table": "attempts"}, "format: "),
])
def test_a_bad_export_is_a_400_naming_the_parameter(viewer: Client, query: dict[str, str],
                                                     reason: str) -> None:
    store(worked_example())
    response = viewer.get("/jobs/j1/", query)
    assert response.status_code == 400
    assert response.content.decode().startswith(f"bad parameters: {reason}")


def test_an_unknown_jobs_export_is_a_404(viewer: Client) -> None:
    assert viewer.get("/jobs/nope/", {"format": "csv", "table": "attempts"}).status_code == 404


def test_lost_time_is_in_gpu_hours_largest_first_with_no_empty_parts(viewer: Client) -> None:
    """The lists' unit: GPU-hours (4 GPUs in the worked example), the wall time beside it."""
    store(worked_example())
    html = page(viewer, "j1")
    section = html[html.index("<h3>By component</h3>"):]
    rows = re.findall(r"<tr><td>([^<]+)</td><td class=\"num\">([^<]+)</td>"
                      r"<td class=\"num\">([^<]+)</td></tr>", section[:section.index("</table>")])
    hours = [float(h) for _, h, _ in rows]
    assert hours == sorted(hours, reverse=True) and all(h > 0 for h in hours)
    assert "Lost GPU-hours</th><th class=\"num\">Wall time" in section
    # 33 wall seconds lost on 4 GPUs: 0.0367 GPU-hours.
    assert re.search(r'id="job-lost-gpu-hours">0\.0367<', html)
