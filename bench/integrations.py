"""``python -m bench.integrations``: what bringing your own trainer costs (issue 30's targets).

Three stages, measured in one run (``bench/integration_stages/``):

1. **frameworks** — the Lightning and transformers callbacks' per-step hooks, in blocks side by
   side with a bare loop of the same length: the per-step cost as a share of a 20 ms step
   (target ≤ 1%), the hooks' own latency, and the p99 of one emit (target ≤ 50 µs).
2. **torch_hooks** — a plain-PyTorch loop of simulated 20 ms steps inside ``reporter.train``
   with ``collector.integrations.torch``'s hooks, beside the same loop bare: the overhead side
   by side and as timed directly (the tighter figure on a noisy machine), and the emit p99.
3. **importers** — each history importer's translation rate (events/s) on a synthetic file.

A stage that cannot run (torch or a framework not installed) says why in its place; the
others still run. The last line of output is one JSON object; ``meets_targets`` is true only
when every stage that has targets met them.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from typing import Any


def _frameworks(args: argparse.Namespace) -> dict[str, Any]:
    from bench.integration_stages.frameworks import measure_callbacks

    return measure_callbacks(args.callback_steps)


def _torch_hooks(args: argparse.Namespace) -> dict[str, Any]:
    from bench.integration_stages.torch_hooks import measure_train_loop

    return measure_train_loop(args.loop_steps, args.step_ms / 1000)


def _importers(args: argparse.Namespace) -> dict[str, Any]:
    from bench.integration_stages.importers import measure_importers

    return dict(measure_importers(args.importer_events))


STAGES: dict[str, Callable[[argparse.Namespace], dict[str, Any]]] = {
    "frameworks": _frameworks, "torch_hooks": _torch_hooks, "importers": _importers}


def run_stage(name: str, args: argparse.Namespace) -> dict[str, Any]:
    """One stage's result, with its wall time; a stage that cannot run says why."""
    started = time.perf_counter()
    try:
        result = STAGES[name](args)
    except ImportError as exc:
        result = {"skipped": f"cannot import {exc.name or exc} (`make install-trainer` "
                             "installs torch and the frameworks)"}
    result["wall_s"] = round(time.perf_counter() - started, 2)
    return result


def summary_line(name: str, result: dict[str, Any]) -> str:
    """One readable line per stage, printed before the JSON."""
    if "skipped" in result:
        return f"{name}: skipped ({result['skipped']})"
    if name == "frameworks":
        parts = [f"{fw} {result[fw]['pct_of_step']:.3f}% of a {result['step_ms']:.0f} ms step"
                 for fw in ("lightning", "transformers") if fw in result]
        return f"{name}: {', '.join(parts)}; emit p99 {result['emit_p99_us']:.1f} µs"
    if name == "torch_hooks":
        return (f"{name}: overhead {100 * result['overhead_fraction']:+.2f}% side by side, "
                f"{100 * result['direct_overhead_fraction']:.3f}% timed directly; "
                f"emit p99 {result['emit_p99_us']:.1f} µs")
    rates = [f"{fmt} {int(r['events_per_s']):,} events/s" for fmt, r in result.items()
             if isinstance(r, dict)]
    return f"{name}: {', '.join(rates)}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.integrations", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--stage", action="append", choices=sorted(STAGES),
                        help="run only this stage (repeatable; default: all)")
    parser.add_argument("--callback-steps", type=int, default=20000,
                        help="steps per framework callback (default %(default)s)")
    parser.add_argument("--loop-steps", type=int, default=500,
                        help="steps per side of the plain-PyTorch loop (default %(default)s)")
    parser.add_argument("--step-ms", type=float, default=20.0,
                        help="the simulated step of that loop, in ms (default %(default)s)")
    parser.add_argument("--importer-events", type=int, default=100_000,
                        help="events in each importer's synthetic file (default %(default)s)")
    parser.add_argument("--quick", action="store_true", help="a small plan, for a smoke test")
    args = parser.parse_args(argv)
    if args.quick:
        args.callback_steps, args.loop_steps, args.importer_events = 1000, 40, 2000
    results: dict[str, Any] = {}
    for name in args.stage or list(STAGES):
        print(f"running {name} …", file=sys.stderr, flush=True)
        results[name] = run_stage(name, args)
        print(summary_line(name, results[name]), flush=True)
    judged = [r["meets_targets"] for r in results.values() if "meets_targets" in r]
    results["meets_targets"] = bool(judged) and all(judged)
    print(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
