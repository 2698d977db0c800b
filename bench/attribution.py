"""How fast attribution is, offline and kept fresh in Postgres (issue 3, deliverable 6).

``python -m bench.attribution [--quick] [--jobs N] [--seed S] [--no-db]``

1. generates a seeded synthetic fleet (``bench.fleet``: >= 2,000 jobs, >= 1M events);
2. times the offline engine on pre-parsed events (``engine_events_per_s``, the median of
   ``--repeats`` runs, so one run disturbed by another process does not decide);
3. times the whole offline report from JSONL: read, parse + validate, attribute, shape the
   §5 document (``report_events_per_s``);
4. unless ``--no-db``: asks ``bench.rollup_cost.measure_rollup_cost`` (the rollup owner's
   code; it sets up Django and Postgres itself) what keeping rollups fresh costs per ingested
   batch against a full recompute.

Progress goes to stderr (tqdm), a human table to stdout, and the LAST stdout line is one
JSON object. Targets on the reference 2-core machine: engine >= 400,000 events/s (issue
31, the data path at full speed) and refresh <= 1/20 of a full recompute; ``*_target_met``
says whether this run met them. The exit status is 0 even when a target is missed
(benchmarks report; CI decides), and 1 when the rollup measurement could not run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from tqdm import tqdm

from bench.fleet import (
    DEFAULT_JOBS,
    DEFAULT_MAX_RANKS,
    DEFAULT_MIN_RANKS,
    fleet_events,
    write_jsonl,
)
from ettweb.attribution.__main__ import build_report, parse_lines
from ettweb.attribution.engine import Event, FleetAttribution, attribute

ENGINE_TARGET_EVENTS_PER_S: Final = 400_000
REFRESH_TARGET_RATIO: Final = 1 / 20
QUICK_JOBS: Final = 40


@dataclass(frozen=True, slots=True)
class Plan:
    """What one benchmark run does; ``--quick`` shrinks it to a smoke test."""

    jobs: int
    seed: int
    repeats: int
    db: bool
    batch_size: int
    batches: int
    min_ranks: int = DEFAULT_MIN_RANKS
    max_ranks: int = DEFAULT_MAX_RANKS


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m bench.attribution",
        description="Benchmark the attribution engine, the offline report and the cost of "
                    "keeping rollups fresh. The last stdout line is one JSON object.")
    parser.add_argument("--quick", action="store_true",
                        help=f"a small fleet ({QUICK_JOBS} jobs, 4-6 ranks) and one repeat")
    parser.add_argument("--jobs", type=int, default=None,
                        help=f"jobs in the fleet (default {DEFAULT_JOBS})")
    parser.add_argument("--seed", type=int, default=0, help="fleet seed (default 0)")
    parser.add_argument("--repeats", type=int, default=None,
                        help="engine runs; the median is reported (default 3, quick 1)")
    parser.add_argument("--no-db", action="store_true",
                        help="skip the rollup measurement (no Django, no Postgres)")
    parser.add_argument("--batch-size", type=int, default=1000,
                        help="events per ingested batch for the rollup measurement")
    parser.add_argument("--batches", type=int, default=20,
                        help="batches timed for the rollup measurement")
    return parser


def _plan(args: argparse.Namespace) -> Plan:
    jobs = args.jobs if args.jobs is not None else (QUICK_JOBS if args.quick else DEFAULT_JOBS)
    repeats = args.repeats if args.repeats is not None else (1 if args.quick else 3)
    if jobs < 1 or repeats < 1:
        raise SystemExit("bench.attribution: --jobs and --repeats must be >= 1")
    ranks = (4, 6) if args.quick else (DEFAULT_MIN_RANKS, DEFAULT_MAX_RANKS)
    return Plan(jobs=jobs, seed=args.seed, repeats=repeats, db=not args.no_db,
                batch_size=args.batch_size, batches=args.batches,
                min_ranks=ranks[0], max_ranks=ranks[1])


def generate(plan: Plan) -> list[Event]:
    """The fleet's events, with a progress bar (generation takes seconds at full size)."""
    events = fleet_events(plan.seed, plan.jobs, min_ranks=plan.min_ranks,
                          max_ranks=plan.max_ranks)
    return list(tqdm(events, desc="generate fleet", unit="ev", unit_scale=True,
                     file=sys.stderr, mininterval=0.5))


def _timed(action: Callable[[], Any]) -> tuple[float, Any]:
    start = time.perf_counter()
    result = action()
    return time.perf_counter() - start, result


def time_engine(events: list[Event], repeats: int) -> tuple[list[float], FleetAttribution]:
    """Seconds of each ``attribute`` run over pre-parsed events, and the last result."""
    runs: list[float] = []
    fleet: FleetAttribution | None = None
    for _ in tqdm(range(repeats), desc="engine", unit="run", file=sys.stderr):
        seconds, fleet = _timed(lambda: attribute(events))
        runs.append(seconds)
    assert fleet is not None  # repeats >= 1
    return runs, fleet


def time_report(events: list[Event]) -> tuple[float, dict[str, Any]]:
    """Seconds for the offline report from a JSONL file: read, parse + validate, attribute,
    shape and serialize the §5 document (what ``python -m ettweb.attribution`` does)."""
    with tempfile.TemporaryDirectory(prefix="ett-bench-") as folder:
        path = Path(folder) / "fleet.jsonl"
        with path.open("w", encoding="utf-8") as stream:
            write_jsonl(tqdm(events, desc="write jsonl", unit="ev", unit_scale=True,
                             file=sys.stderr, mininterval=0.5), stream)

        def report() -> dict[str, Any]:
            with path.open("rb") as stream:
                parsed, rejected = parse_lines(stream.read().splitlines())
            document = build_report(attribute(parsed), rejected)
            json.dumps(document, allow_nan=False)
            return document

        print("report: parse + validate + attribute ...", file=sys.stderr)
        return _timed(report)


def measure_rollups(events: list[Event], plan: Plan) -> dict[str, Any]:
    """The rollup owner's measurement, imported late: ``--no-db`` needs no Django at all."""
    from bench.rollup_cost import measure_rollup_cost

    # The timed batches are the fleet's newest events; they may take at most half of a
    # small (--quick) fleet, else the "full recompute" would run on an almost empty database.
    batches = max(1, min(plan.batches, len(events) // (2 * plan.batch_size)))
    print("rollups: per-batch refresh vs full recompute ...", file=sys.stderr)
    cost = measure_rollup_cost(events, batch_size=plan.batch_size, batches=batches)
    return {
        "rollup_refresh_s_per_batch": cost["per_batch_refresh_s"],
        "full_recompute_s": cost["full_recompute_s"],
        "refresh_over_full_ratio": cost["ratio"],
        "refresh_target_met": cost["ratio"] <= REFRESH_TARGET_RATIO,
        "rollup_batches": batches,
        "rollup_batch_size": plan.batch_size,
        "rollup_jobs_per_batch_median": cost.get("jobs_per_batch_median"),
    }


def run(plan: Plan) -> dict[str, Any]:
    """Run the benchmark; returns the JSON summary (its keys are the bench's contract)."""
    load_before = os.getloadavg()[0]
    events = generate(plan)
    runs, fleet = time_engine(events, plan.repeats)
    engine_rate = len(events) / statistics.median(runs)
    report_s, document = time_report(events)
    summary: dict[str, Any] = {
        "events": len(events),
        "jobs": len(fleet.jobs),
        "seed": plan.seed,
        "engine_events_per_s": round(engine_rate),
        "engine_runs_s": [round(seconds, 3) for seconds in runs],
        "engine_spread_pct": round(100 * (max(runs) - min(runs)) / min(runs), 1),
        "engine_target_met": engine_rate >= ENGINE_TARGET_EVENTS_PER_S,
        "report_events_per_s": round(len(events) / report_s),
        "fleet_ett_pct": document["fleet"]["ett_pct"],
        "restarts": sum(len(job.attempts) - 1 for job in fleet.jobs),
        "failures": sum(job.failures for job in fleet.jobs),
        "load_avg_1m_before": round(load_before, 2),
    }
    if plan.db:
        try:
            summary.update(measure_rollups(events, plan))
        except Exception as err:  # the JSON line must still come out, with the reason
            summary["rollup_error"] = f"{type(err).__name__}: {err}"
    return summary


def _table(summary: dict[str, Any]) -> str:
    rows = [
        ("events", f"{summary['events']:,}"),
        ("jobs / restarts / failures",
         f"{summary['jobs']:,} / {summary['restarts']:,} / {summary['failures']:,}"),
        ("fleet ETT%", f"{summary['fleet_ett_pct']:.2f}"),
        ("offline engine", f"{summary['engine_events_per_s']:,} events/s "
                           f"(median of {len(summary['engine_runs_s'])}, "
                           f"spread {summary['engine_spread_pct']}%)"),
        ("offline report from JSONL", f"{summary['report_events_per_s']:,} events/s"),
    ]
    if "refresh_over_full_ratio" in summary:
        rows += [
            ("rollup refresh per batch", f"{summary['rollup_refresh_s_per_batch']:.4f} s"),
            ("full recompute", f"{summary['full_recompute_s']:.3f} s"),
            ("refresh / full", f"{summary['refresh_over_full_ratio']:.4f} "
                               f"(target <= {REFRESH_TARGET_RATIO:.2f})"),
        ]
    if "rollup_error" in summary:
        rows.append(("rollups", f"not measured: {summary['rollup_error']}"))
    width = max(len(name) for name, _ in rows)
    return "\n".join(f"{name:<{width}}  {value}" for name, value in rows)


def main(argv: Sequence[str] | None = None) -> int:
    plan = _plan(_parser().parse_args(argv))
    summary = run(plan)
    print(_table(summary))
    print(json.dumps(summary), flush=True)
    return 1 if "rollup_error" in summary else 0


if __name__ == "__main__":
    sys.exit(main())
