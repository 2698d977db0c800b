"""``/metrics``: Prometheus's text format behind an API token, numbers equal to the API's for
the same scope, low-cardinality labels only, and counters that never go down: the scrape
shows the floors beat's ``ett.raise_counter_floors`` raised, and writes nothing."""

from __future__ import annotations

import re
import time
from collections import defaultdict
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from ettweb.access.tokens import issue_token
from ettweb.ingest.models import CollectorHealth
from ettweb.ingest.tasks import ingest_batch
from ettweb.metrics.models import CounterFloor
from ettweb.metrics.tasks import raise_counter_floors
from ettweb.platform.schedule import BEAT_SCHEDULE
from ettweb.rollups.marks import mark_dirty
from ettweb.rollups.models import DailyCategoryRollup, ParkedRefresh
from tests.conftest import mark, span
from tests.ettweb.rollouts.test_rollout_impact import H, _day, day_job, store

pytestmark = pytest.mark.django_db


def _failed_then_completed(job: str, d: int) -> list[dict[str, Any]]:
    """Attempt 0 trains 1 h and fails; attempt 1 restarts 10 min later and trains 2 h."""
    t0 = _day(d)
    attrs = {"gpus": 8, "team": "feed", "model": "dlrm", "cluster": "west"}
    return [mark(job, 0, "attempt_start", t0, attrs=attrs),
            span(job, 0, "train", t0, t0 + H, step_start=0, step_end=100),
            mark(job, 0, "attempt_end", t0 + H + 60, attrs={"status": "failed"}),
            mark(job, 1, "attempt_start", t0 + H + 600, attrs=attrs),
            span(job, 1, "train", t0 + H + 600, t0 + 3 * H + 600, step_start=100,
                 step_end=300),
            mark(job, 1, "attempt_end", t0 + 3 * H + 600, attrs={"status": "completed"})]


@pytest.fixture
def token() -> str:
    store([*day_job("a", 9, 2, "ads", ("compile", 1), 9),
           *day_job("b", 11, 4, "ads", ("checkpoint_save", 1), 9),
           *_failed_then_completed("c", 10)])
    CollectorHealth.objects.create(source="node-1", backlog_events=5, dropped_events=2)
    raise_counter_floors()  # beat's pass
    return issue_token(User.objects.create_user("prometheus"), "scraper")


def scrape(client: Client, token: str) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    response = client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {token}")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain; version=0.0.4")
    samples: dict[str, dict[tuple[tuple[str, str], ...], float]] = defaultdict(dict)
    for family in text_string_to_metric_families(response.content.decode()):
        for sample in family.samples:
            samples[sample.name][tuple(sorted(sample.labels.items()))] = sample.value
    return samples


def test_the_totals_equal_the_apis_fleet_summary_over_the_same_days(client: Client,
                                                                     token: str) -> None:
    metrics = scrape(client, token)
    days = sorted(DailyCategoryRollup.objects.values_list("day", flat=True).distinct())
    api = client.get(f"/api/v1/fleet/summary?date_from={days[0]}&date_to={days[-1]}",
                     HTTP_AUTHORIZATION=f"Bearer {token}").json()
    wall = sum(metrics["ett_wall_gpu_seconds_total"].values())
    productive = sum(metrics["ett_productive_gpu_seconds_total"].values())
    assert wall == pytest.approx(api["wall_gpu_s"])
    assert productive == pytest.approx(api["productive_gpu_s"])
    assert 100 * productive / wall == pytest.approx(api["ett_pct"])
    lost: dict[str, float] = defaultdict(float)
    for labels, value in metrics["ett_lost_gpu_seconds_total"].items():
        lost[dict(labels)["component"]] += value
    assert dict(lost) == pytest.approx(
        {c: s for c, s in api["lost_by_component_gpu_s"].items() if s})
    assert sum(metrics["ett_failures_total"].values()) == api["failures"] == 1
    assert wall - productive == pytest.approx(sum(lost.values()))


def test_series_are_per_team_and_cluster_never_per_job(client: Client, token: str) -> None:
    metrics = scrape(client, token)
    assert set(metrics["ett_wall_gpu_seconds_total"]) == {
        (("cluster", "east"), ("team", "ads")), (("cluster", "west"), ("team", "feed"))}
    assert metrics["ett_failures_total"][(("cluster", "west"), ("team", "feed"))] == 1
    labels = {name for series in metrics.values() for key in series for name, _ in key}
    assert labels <= {"team", "cluster", "component", "state"}
    # The restart's 9 minutes of gap and the failure's teardown belong to their owners.
    feed = {dict(k)["component"]: v for k, v in metrics["ett_lost_gpu_seconds_total"].items()
            if dict(k)["team"] == "feed"}
    assert set(feed) == {"reliability", "scheduler"} and all(v > 0 for v in feed.values())


def test_pipeline_gauges(client: Client, token: str) -> None:
    metrics = scrape(client, token)
    assert metrics["ett_collectors"] == {(("state", "reporting"),): 1.0,
                                         (("state", "silent"),): 0.0,
                                         (("state", "rejected"),): 0.0}
    ingest_batch.apply(args=(['{"v": 1}'], "node-unsigned", None)).get()  # refused: no auth
    assert scrape(client, token)["ett_collectors"] == {(("state", "reporting"),): 1.0,
                                                       (("state", "silent"),): 0.0,
                                                       (("state", "rejected"),): 1.0}
    assert metrics["ett_collector_backlog_events"] == {(): 5.0}
    assert metrics["ett_collector_dropped_events"] == {(): 2.0}
    assert metrics["ett_rollup_pending_jobs"] == {(): 0.0}
    assert metrics["ett_rollup_lag_seconds"] == {(): 0.0}
    assert metrics["ett_rollup_parked_jobs"] == {(): 0.0}


def test_a_parked_job_is_its_own_gauge_not_lag(client: Client, token: str) -> None:
    """A parked job keeps its dirty mark; the lag gauges measure the pipeline, so they
    leave it out, and ``ett_rollup_parked_jobs`` counts it."""
    mark_dirty(["stuck", "waiting"], time.time() - 600, 60.0)
    ParkedRefresh.objects.create(job="stuck", error="JobOutOfBounds: …", failures=2,
                                 parked_at=timezone.now())
    metrics = scrape(client, token)
    assert metrics["ett_rollup_parked_jobs"] == {(): 1.0}
    assert metrics["ett_rollup_pending_jobs"] == {(): 1.0}
    assert 590 <= metrics["ett_rollup_lag_seconds"][()] < 700


def test_a_counter_never_goes_down(client: Client, token: str) -> None:
    """A correction that lowers a total is held at the highest value shown (a decrease would
    read as a counter reset and ``rate()`` would count the fleet's whole history again)."""
    before = scrape(client, token)["ett_wall_gpu_seconds_total"]
    DailyCategoryRollup.objects.filter(job_id="a").update(gpu_seconds=0.0)  # a correction
    assert raise_counter_floors() == 2 + 2 + 2 + 4 + 1  # wall, productive, failures, lost
    after = scrape(client, token)["ett_wall_gpu_seconds_total"]
    assert after == before
    assert CounterFloor.objects.filter(series__startswith="ett_wall_gpu_seconds").count() == 2
    store(day_job("d", 12, 1, "ads", ("compile", 1), 100))  # new data raises it again
    ads = (("cluster", "east"), ("team", "ads"))
    assert scrape(client, token)["ett_wall_gpu_seconds_total"][ads] == before[ads]  # not yet
    raise_counter_floors()
    grown = scrape(client, token)["ett_wall_gpu_seconds_total"]
    assert grown[ads] > before[ads]


def test_a_scrape_writes_nothing_and_shows_what_the_pass_raised(client: Client,
                                                                 token: str) -> None:
    """Counters come from the stored floors only (a series no pass has seen yet is left
    out); gauges are live. Beat runs the pass often, so the counters trail by seconds."""
    entry = BEAT_SCHEDULE["raise-counter-floors"]
    assert entry["task"] == "ett.raise_counter_floors"
    assert entry["schedule"] <= 60 and entry["options"]["expires"] < entry["schedule"]
    floors = list(CounterFloor.objects.order_by("series").values_list("series", "value"))
    store(day_job("e", 12, 4, "infra", ("compile", 1), 9))  # a new team: no floor yet
    CollectorHealth.objects.create(source="node-2", backlog_events=7)
    with CaptureQueriesContext(connection) as queries:
        metrics = scrape(client, token)
    writes = [q["sql"] for q in queries.captured_queries
              if re.match(r"\s*(INSERT|UPDATE|DELETE)", q["sql"], re.IGNORECASE)]
    assert writes == []
    assert list(CounterFloor.objects.order_by("series").values_list("series", "value")) == floors
    assert metrics["ett_collector_backlog_events"] == {(): 12.0}  # live
    infra = (("cluster", "east"), ("team", "infra"))
    assert infra not in metrics["ett_wall_gpu_seconds_total"]
    raise_counter_floors()
    assert scrape(client, token)["ett_wall_gpu_seconds_total"][infra] == 10 * H * 4


@pytest.mark.parametrize("header", [None, "Bearer nope", "Basic dXNlcjpwdw==", "Bearer "])
def test_without_a_valid_token_it_is_a_401_that_says_how_to_get_one(client: Client,
                                                                     header: str | None) -> None:
    extra = {"HTTP_AUTHORIZATION": header} if header is not None else {}
    response = client.get("/metrics", **extra)
    assert response.status_code == 401
    assert response["WWW-Authenticate"].startswith("Bearer")
    assert "ett_api_token" in response.content.decode()
    assert client.post("/metrics").status_code in (401, 405)


def test_the_grafana_dashboard_charts_what_metrics_exports(client: Client, token: str) -> None:
    """deploy/grafana/ett-dashboard.json: valid JSON whose every query names only metrics
    /metrics serves, charting each counter, with ETT% as productive over wall."""
    import json
    import re
    from pathlib import Path

    dashboard = json.loads((Path(__file__).resolve().parents[3] / "deploy" / "grafana" /
                            "ett-dashboard.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    used = {name for expr in exprs for name in re.findall(r"\bett_[a-z_]+", expr)}
    served = set(scrape(client, token))
    assert used <= served, used - served
    assert {n for n in served if n.endswith("_total")} <= used
    ett = next(p for p in dashboard["panels"] if p["title"] == "Fleet ETT%")["targets"][0]["expr"]
    rate = r"sum\(increase\(ett_{}_gpu_seconds_total\{{.*\}}\[\$window\]\)\)"
    assert re.fullmatch(r"100 \* " + rate.format("productive") + " / " + rate.format("wall"), ett)
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    variables = {v["name"] for v in dashboard["templating"]["list"]}
    assert {"datasource", "team", "cluster", "window"} <= variables
