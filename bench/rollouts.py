"""``python -m bench.rollouts``: import rate and rollout pages on a fleet worth looking at.

1. **Import**: the simulated fleet (``ettweb.simulate``; ≥ 20,000 jobs over 180 days by
   default) is written to a JSONL file, then ``manage.py ett_import`` reads it back into an
   empty database — the way a team brings its history on day one. The clock covers the
   whole command (parse, validate, store, dedup, partitions, and the rollup refresh of every
   imported job); events/s = lines / seconds. The file is written before the clock starts.
   The same run is split in two: storing (the command's time less its refresh, which the
   command reports) and the refresh, each with its own events/s. Why: the import target
   counts both, and which one a change has to shrink is the first thing to know.
   **The floor** (``bench.rollouts_stages.floor``): the rows the import left (events, ids, jobs,
   every rollup table) copied out and COPYed back into empty tables with the same indexes
   and foreign keys, on two connections, timed: the least time any import of this data into
   these tables can take on this machine. ``import_over_floor`` is the import's time over
   it, a ratio that holds from one machine to another where events/s do not;
   ``floor_events_per_s`` is the most a target in events/s could ask here.
2. **Serving**: with every simulated rollout stored, each of these is requested several times
   through Django's full stack (middleware, auth, query, template or JSON) and its server
   time taken: the impact endpoint (``/api/v1/rollouts/<id>/impact``, bearer token), the
   rollout page (``/rollouts/<id>/``) and every component page (``/components/<name>/``).
   p50 and p95 per kind are printed.

Everything runs on a dedicated database (``ett_bench_rollouts``; ``--database`` names
another), created, migrated and dropped here. The last line of output is one JSON object;
``meets_targets`` says whether the impact p95 is ≤ 300 ms and the import ≥ 50,000 events/s.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from io import StringIO
from pathlib import Path
from typing import Any

from bench.rollouts_stages import floor as postgres_floor
from bench.rollouts_stages.floor import machine_busy_s
from bench.rollup_cost import _setup_django, bench_database

DATABASE = "ett_bench_rollouts"
IMPACT_P95_TARGET_MS = 300.0
IMPORT_TARGET_EVENTS_PER_S = 50_000.0


def _say(text: str) -> None:
    print(f"[bench.rollouts] {text}", file=sys.stderr, flush=True)


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (linear interpolation, as numpy's default)."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    at = (len(ordered) - 1) * q / 100.0
    low = int(at)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (at - low)


def write_fleet(path: Path, seed: int, days: int, jobs: int) -> tuple[int, Any]:
    """The simulated fleet as JSONL at ``path``; returns (lines, the rollout schedule)."""
    from ettweb.simulate.fleet import FleetPlan
    from ettweb.simulate.rollout_plan import rollout_schedule
    from ettweb.simulate.store import event_lines, today_utc

    plan = FleetPlan(seed=seed, days=days, jobs=jobs, end=today_utc(), until=time.time())
    schedule = rollout_schedule(plan)
    lines = 0
    with path.open("wb") as out:
        for line in event_lines(plan, schedule):
            out.write(line)
            out.write(b"\n")
            lines += 1
    return lines, schedule


def timed_import(path: Path) -> tuple[float, str]:
    """Seconds for the whole ``ett_import`` command, and its summary line."""
    from django.core.management import call_command

    out = StringIO()
    began = time.perf_counter()
    call_command("ett_import", str(path), "--no-progress", stdout=out)
    return time.perf_counter() - began, out.getvalue().strip().splitlines()[-1]


#: How ``ett_import``'s summary line ends: ``…; 19,989 jobs refreshed in 78.4 s``.
_REFRESHED = re.compile(r"refreshed in (\d+(?:\.\d+)?) s$")


def refresh_seconds(summary: str) -> float:
    """The refresh's seconds from ``ett_import``'s summary line (a ``ValueError`` naming the
    line when it does not say them: the command's wording changed)."""
    found = _REFRESHED.search(summary)
    if found is None:
        raise ValueError(f"no refresh time in ett_import's summary line: {summary!r}")
    return float(found.group(1))


def phases(events: int, seconds: float, refresh_s: float) -> dict[str, float]:
    """The import split into storing and refreshing, each with its events/s."""
    store_s = max(seconds - refresh_s, 1e-9)
    return {"store_s": round(store_s, 2), "refresh_s": round(refresh_s, 2),
            "store_events_per_s": round(events / store_s),
            "refresh_events_per_s": round(events / max(refresh_s, 1e-9)),
            "refresh_share": round(refresh_s / seconds, 3)}


def _measure_floor(import_s: float) -> postgres_floor.Floor:
    """The floor of the import just timed, after the serving was (600 MB written and
    dropped would leave the pages' reads a colder cache than the import did)."""
    from django.db import connection

    from ettweb.settings.env import database_url

    _say("the floor: copying the imported rows out and COPYing them back…")
    floor = postgres_floor.measure(database_url(connection.settings_dict))
    _say(f"the floor: {floor.rows:,} rows ({floor.megabytes:.0f} MB) in {floor.seconds:.1f} s; "
         f"the import took {import_s / floor.seconds:.1f} times as long")
    return floor


def server_times(client: Any, paths: Sequence[str], repeats: int,
                 headers: dict[str, str] | None = None) -> list[float]:
    """Milliseconds per request, each path ``repeats`` times (interleaved, not in a row)."""
    samples: list[float] = []
    for _ in range(repeats):
        for path in paths:
            began = time.perf_counter()
            response = client.get(path, **(headers or {}))
            samples.append(1000.0 * (time.perf_counter() - began))
            if response.status_code != 200:
                raise SystemExit(f"bench.rollouts: GET {path} answered {response.status_code}: "
                                 f"{response.content[:300]!r}")
    return samples


def _summary(samples: list[float]) -> dict[str, float]:
    return {"p50_ms": round(percentile(samples, 50), 1),
            "p95_ms": round(percentile(samples, 95), 1), "requests": len(samples)}


def measure_serving(repeats: int) -> dict[str, dict[str, float]]:
    """p50/p95 server time of the impact endpoint, the rollout and the component pages."""
    from django.contrib.auth.models import User
    from django.test import Client

    from ettweb.access.tokens import issue_token
    from ettweb.components.known import known_components
    from ettweb.rollouts.models import Rollout

    user = User.objects.create_user("bench", is_staff=True)
    token = issue_token(user, "bench")
    client = Client()
    client.force_login(user)
    ids = list(Rollout.objects.order_by("at").values_list("pk", flat=True))
    bearer = {"HTTP_AUTHORIZATION": f"Bearer {token}"}
    timings: dict[str, Callable[[], list[float]]] = {
        "impact": lambda: server_times(client, [f"/api/v1/rollouts/{i}/impact" for i in ids],
                                       repeats, bearer),
        "rollout_page": lambda: server_times(client, [f"/rollouts/{i}/" for i in ids], repeats),
        "component_page": lambda: server_times(
            client, [f"/components/{name}/" for name in known_components()],
            max(1, repeats // 2)),
    }
    server_times(client, [f"/rollouts/{ids[0]}/"], 1)  # first request: imports, templates
    results = {}
    for kind, measure in timings.items():
        _say(f"timing {kind}…")
        results[kind] = _summary(measure())
    return results


def run(args: argparse.Namespace) -> dict[str, Any]:
    _setup_django()
    with tempfile.TemporaryDirectory(prefix="ett-bench-rollouts-") as tmp:
        path = Path(tmp) / "fleet.jsonl"
        _say(f"writing a simulated fleet of {args.jobs:,} jobs over {args.days} days…")
        began = time.perf_counter()
        lines, schedule = write_fleet(path, args.seed, args.days, args.jobs)
        _say(f"{lines:,} events in {time.perf_counter() - began:.1f} s "
             f"({path.stat().st_size / 2**20:.0f} MiB); importing with ett_import…")
        with bench_database(args.database):
            from ettweb.simulate.store import upsert_rollouts

            rollouts = upsert_rollouts(schedule)
            busy = machine_busy_s()
            seconds, summary = timed_import(path)
            after = machine_busy_s()
            _say(summary)
            serving = measure_serving(args.repeats)
            floor = _measure_floor(seconds)
    import_cpu = None if busy is None or after is None else round(after - busy, 2)
    impact_p95 = serving["impact"]["p95_ms"]
    rate = lines / seconds
    return {
        "benchmark": "rollouts", "jobs": args.jobs, "days": args.days, "seed": args.seed,
        "events": lines, "rollouts": rollouts, "import_s": round(seconds, 2),
        "import_events_per_s": round(rate),
        **phases(lines, seconds, refresh_seconds(summary)), "import_cpu_s": import_cpu,
        **floor.as_dict(), "import_over_floor": round(seconds / floor.seconds, 2),
        "floor_events_per_s": round(lines / floor.seconds), **{f"{kind}_{key}": value
                                               for kind, numbers in serving.items()
                                               for key, value in numbers.items()},
        "targets": {"impact_p95_ms": IMPACT_P95_TARGET_MS,
                    "import_events_per_s": IMPORT_TARGET_EVENTS_PER_S},
        "meets_targets": impact_p95 <= IMPACT_P95_TARGET_MS and
        rate >= IMPORT_TARGET_EVENTS_PER_S,
        "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.rollouts", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=20_000, help="simulated jobs (20,000)")
    parser.add_argument("--days", type=int, default=180, help="days they cover (180)")
    parser.add_argument("--seed", type=int, default=0, help="simulation seed (0)")
    parser.add_argument("--repeats", type=int, default=5,
                        help="requests per rollout and kind (5; component pages get half)")
    parser.add_argument("--database", default=DATABASE,
                        help=f"database made for the run and dropped after ({DATABASE})")
    args = parser.parse_args(argv)
    if args.jobs < 1 or not 1 <= args.days <= 3650 or args.repeats < 1:
        parser.error("--jobs and --repeats must be at least 1, --days between 1 and 3650")
    return args


def main(argv: list[str] | None = None) -> int:
    result = run(parse_args(argv))
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
