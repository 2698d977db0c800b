"""``python -m bench.dashboard``: every dashboard page and API endpoint at fleet scale.

Every page must answer in a blink for a fleet infra owners live in: at least 5,000,000 events
of 20,000 jobs over 180 days, p95 server time <= 300 ms. This bench builds such a fleet and
times everything a person or a program can GET. Its stages live in ``bench.dashboard_stages``:

1. **The fleet** (``fleet``, kept between runs by ``database``): ``ettweb.simulate``'s fleet
   (models, teams, clusters, GPU sizes from 1 to 3,072, failures and restarts, seven
   optimizations rolled out in two stages each, stored as rollouts), with every rank of a job
   emitting its phases, stored the way production stores it: through the worker's ingest
   logic and the product's own rollup refresh. Collectors report health and ingestion
   quarantines some bad lines, so every page has data. The database
   (``ett_bench_dashboard``; ``--quick`` uses ``ett_bench_dashboard_quick``) is reused by a
   later run with the same plan; ``--rebuild`` forces a load.
2. **Server time** (``discovery``, ``catalog``, ``forms``, ``timing``): every URL pattern of
   Django's resolver (outside ``admin/`` and ``accounts/``) and every GET of the OpenAPI
   document is requested ``--repeats`` times in-process through ``django.test.Client``, with
   ``time.perf_counter()`` around each request. Parameters are filled from the database by
   name, and from the page's own GET forms and same-page links, so filters added later are
   exercised too. A route the bench cannot fill, or one that refuses GET, is listed under
   ``unmeasured`` with the reason, never skipped silently. Before timing, beat's warm pass
   runs once; after it, ``cold_impacts`` prices every rollout's impact at windows no warm
   pass computes (``impacts``: reported beside the pages, not in the target).
3. **The raw path** (``raw_path``): for one representative request per page, the same
   numbers computed from raw events; the ratio is raw ms / the stored request's server ms
   (median of 5).

The last line of output is one JSON object: sizes, load time, per page and endpoint p50/p95,
the raw path and ratio, the target and ``meets_target`` per page and overall.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, Final

from bench.dashboard_stages import say
from bench.dashboard_stages.catalog import Catalog, Filler, load_catalog
from bench.dashboard_stages.database import fleet_database
from bench.dashboard_stages.discovery import Target, discover_endpoints, discover_pages
from bench.dashboard_stages.fleet import FleetSize, store_collectors
from bench.dashboard_stages.impacts import cold_impacts, warm_as_beat_does
from bench.dashboard_stages.raw_path import RawScope, raw_numbers, scope_for, stored_ett_pct
from bench.dashboard_stages.timing import Measurer, Timing, bench_client
from bench.rollouts import percentile
from bench.rollup_cost import _setup_django

DATABASE: Final = "ett_bench_dashboard"
QUICK_DATABASE: Final = "ett_bench_dashboard_quick"
TARGET_P95_MS: Final = 300.0


def _summary(target: Target, timing: Timing) -> dict[str, Any]:
    samples = timing.samples_ms
    p95 = round(percentile(samples, 95), 1) if samples else None
    return {
        "name": target.name, "auth": target.auth, "requests": len(samples) + len(timing.errors),
        "errors": len(timing.errors), "error_samples": timing.errors,
        "p50_ms": round(percentile(samples, 50), 1) if samples else None, "p95_ms": p95,
        "max_ms": round(max(samples), 1) if samples else None,
        "params": sorted(p.name for p in target.params), "sample_urls": timing.sample_urls,
        "meets_target": bool(samples) and not timing.errors and p95 is not None
        and p95 <= TARGET_P95_MS}


def measure_all(repeats: int, seed: int) -> dict[str, Any]:
    """Discover every page and endpoint, time each, then the raw path per scope."""
    client, user, token = bench_client()
    catalog = load_catalog(user)
    measurer = Measurer(client, token, Filler(catalog), seed)
    pages, excluded, unmeasured = discover_pages()
    document = client.get("/api/v1/openapi.json").json()
    targets = pages + discover_endpoints(document)
    results: dict[str, dict[str, dict[str, Any]]] = {"page": {}, "endpoint": {}}
    measured: list[Target] = []
    for target in targets:
        why = measurer.prepare(target)
        if why is not None:
            unmeasured.append({"route": target.key, "name": target.name, "reason": why})
            say(f"unmeasured {target.key}: {why}")
            continue
        timing = measurer.measure(target, repeats)
        results[target.kind][target.key] = _summary(target, timing)
        measured.append(target)
        row = results[target.kind][target.key]
        errors = f", {row['errors']} errors" if row["errors"] else ""
        say(f"{target.key}: p50 {row['p50_ms']} ms, p95 {row['p95_ms']} ms{errors}")
    _raw_paths(measurer, measured, results, catalog)
    return {"pages": results["page"], "endpoints": results["endpoint"],
            "unmeasured": unmeasured, "excluded": excluded, "catalog": {
                "first_day": catalog.first_day.isoformat(),
                "last_day": catalog.last_day.isoformat(), "biggest_job": catalog.biggest_job,
                "rollouts": len(catalog.rollouts), "components": len(catalog.components),
                "collectors": len(catalog.sources)}}


def _raw_paths(measurer: Measurer, targets: Sequence[Target],
               results: dict[str, dict[str, dict[str, Any]]], catalog: Catalog) -> None:
    """Per target: the representative request's stored ms, its scope's raw ms, the ratio."""
    raw: dict[RawScope, dict[str, Any]] = {}
    for target in targets:
        url, params = measurer.representative(target)
        row = results[target.kind][target.key]
        row["representative"] = url
        row["stored_ms"] = round(measurer.stored_ms(target, url), 1)
        scope = scope_for(target, params, catalog)
        if scope is None:
            row.update(raw_scope=None, raw_ms=None, ratio=None)
            continue
        if scope not in raw:
            say(f"raw path over {scope.label}…")
            raw[scope] = {**raw_numbers(scope), "stored_ett_pct": stored_ett_pct(scope)}
            say(f"  {raw[scope]['raw_events']:,} events of {raw[scope]['raw_jobs']:,} jobs "
                 f"in {raw[scope]['raw_ms']:,.0f} ms")
        row.update(raw_scope=scope.label, **raw[scope])
        row["ratio"] = (float(f"{row['raw_ms'] / row['stored_ms']:.3g}") if row["stored_ms"]
                        else None)


def _table(result: dict[str, Any]) -> str:
    lines = [f"{'target':<44} {'n':>4} {'err':>3} {'p50 ms':>8} {'p95 ms':>8} "
             f"{'raw ms':>10} {'ratio':>8}  ok"]
    for group in ("pages", "endpoints"):
        for key, row in result[group].items():
            raw = f"{row['raw_ms']:,.0f}" if row.get("raw_ms") is not None else "-"
            ratio = "-" if row.get("ratio") is None else (
                f"{row['ratio']:,.0f}x" if row["ratio"] >= 100 else f"{row['ratio']:.3g}x")
            lines.append(f"{key[:44]:<44} {row['requests']:>4} {row['errors']:>3} "
                         f"{_ms(row['p50_ms']):>8} {_ms(row['p95_ms']):>8} {raw:>10} "
                         f"{ratio:>8}  {'yes' if row['meets_target'] else 'NO'}")
    for row in result["unmeasured"]:
        lines.append(f"{row['route'][:44]:<44} unmeasured: {row['reason']}")
    return "\n".join(lines)


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def run(args: argparse.Namespace) -> dict[str, Any]:
    _setup_django()
    size = FleetSize(seed=args.seed, jobs=args.jobs, days=args.days, events=args.events)
    with fleet_database(args.database, size, rebuild=args.rebuild, drop=args.drop) as info:
        collectors = store_collectors(size)
        warm = warm_as_beat_does()
        say(f"timing every page and endpoint, {args.repeats} requests each…")
        began = time.perf_counter()
        measured = measure_all(args.repeats, args.seed)
        measure_s = time.perf_counter() - began
        cold = cold_impacts()
    rows = [*measured["pages"].values(), *measured["endpoints"].values()]
    return {
        "benchmark": "dashboard", "seed": args.seed, "database": args.database,
        "jobs": info.jobs, "jobs_target": args.jobs, "days": args.days, "events": info.events,
        "events_target": args.events, "ranks_cap": info.ranks_cap, "rollouts": info.rollouts,
        "collectors": collectors, "quarantined_lines": info.quarantined_lines,
        "reused": info.reused, "loaded_at": info.loaded_at, "load_s": round(info.load_s, 1),
        "load_parts_s": {"generate": info.generate_s, "import": info.import_s,
                         "refresh": info.refresh_s},
        "load_events_per_s": round(info.events / info.load_s) if info.load_s else None,
        "repeats": args.repeats, "timing": "in-process django.test.Client, perf_counter "
                                           "around each request (server time, no network)",
        "measure_s": round(measure_s, 1), "target_p95_ms": TARGET_P95_MS, **measured,
        "warm_pass": warm, "cold_impacts": cold,
        "meets_target": bool(rows) and all(row["meets_target"] for row in rows)
        and not measured["unmeasured"] and info.jobs >= args.jobs
        and info.events >= args.events,
        "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.dashboard", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, help="simulated jobs (20,000; --quick 300)")
    parser.add_argument("--days", type=int, help="days they cover (180; --quick 30)")
    parser.add_argument("--events", type=int,
                        help="at least this many events, through ranks (5,000,000; --quick 30,000)")
    parser.add_argument("--seed", type=int, default=0, help="simulation seed (0)")
    parser.add_argument("--repeats", type=int,
                        help="requests per page and endpoint (30; --quick 5)")
    parser.add_argument("--quick", action="store_true",
                        help="a small fleet in its own database: a smoke run of a minute or two")
    parser.add_argument("--rebuild", action="store_true",
                        help="load the fleet again even if the database holds it")
    parser.add_argument("--database", help=f"database name ({DATABASE}; --quick {QUICK_DATABASE})")
    parser.add_argument("--drop", action="store_true", help="drop the database at the end")
    args = parser.parse_args(argv)
    full = {"jobs": 20_000, "days": 180, "events": 5_000_000, "repeats": 30,
            "database": DATABASE}
    quick = {"jobs": 300, "days": 30, "events": 30_000, "repeats": 5, "database": QUICK_DATABASE}
    for name, default in (quick if args.quick else full).items():
        if getattr(args, name) is None:
            setattr(args, name, default)
    if args.jobs < 1 or not 14 <= args.days <= 3650 or args.repeats < 1 or args.events < 0:
        parser.error("--jobs and --repeats must be at least 1, --days between 14 and 3650, "
                     "--events not negative")
    if not re.fullmatch(r"[a-z_][a-z0-9_]{0,62}", args.database):
        parser.error("--database must be a plain lower-case name (letters, digits, _)")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    result = run(parse_args(argv))
    print(_table(result))
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
