"""``python -m bench.lifecycle``: what the lifecycle optimizations buy, measured by ETT itself.

Runs the reference trainer (``python -m trainer``) on one plan — same steps, same failure
schedule (crashes at ~30% and ~70% of the steps) — for each profile (``baseline``,
``optimized``), **interleaved and repeated** (``--repeats 2``: baseline, optimized, optimized,
baseline), so that a machine whose load drifts during the hour moves both profiles alike. Why:
one run per profile cannot tell an effect from the machine's mood (measured on 2026-12-01: the
same command gave +20.5% and +12.5%). Every optimized run shares one compile store
(trainer.compile_store), emptied when the benchmark starts, and before the repetitions one
more optimized run — the first job of the model, against the empty store — fills it: the
benchmark shows that cold-store job and the warm-store jobs after it. Every number comes from
the events those runs spooled through the Reporter, fed to the offline report
(``python -m ettweb.attribution``): the same numbers the dashboard shows.

Prints every run (its ETT%, wall time, time to start, compile seconds and the load average
while it ran), each profile's median run in full, and per profile the median ETT% and its
min-max over the interleaved runs (the cold-store run is shown beside them, not in them: it
is what the first job of a model pays, once per model and torch version); a gain is called
only when the ranges do not overlap. The last line is one JSON
object: the medians, their ratio, the ranges, each run and the verdict. ``--ablation`` adds one
run per optimization alone (each against a control: the baseline and every run whose switch
leaves that component alone); it takes another two hours on 2 cores.

``--quick`` is a small plan, one run per profile (a few minutes on 2 cores); ``--plan-only``
prints the plan and the commands and runs nothing; ``--resume`` reuses the runs an interrupted
invocation finished (same command, same work dir) and runs the rest. ``--device`` is passed to
every run (``cuda``: the trainer's hybrid placement, tables on CPU and dense part on the GPU).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, NoReturn

from collector.spool_reader import read_records
from trainer import compile_store, launch
from trainer.config import DEVICES, OPTIMIZATIONS, resolve_device

REPO = Path(__file__).resolve().parents[1]

#: The component each optimization is meant to shrink (ETT_SPEC §4).
OWN_COMPONENT = {
    "init_overlap": "trainer_init", "plan_cache": "trainer_init",
    "compile_cache": "pt2_compiler", "dynamic_shapes": "pt2_compiler",
    "autotune_pruning": "pt2_compiler", "async_checkpoint": "checkpointing",
    "oob_publish": "model_publishing", "recovery": "reliability",
}
#: Every component a switch changes by design: its own, and what it trades for it (recovery
#: saves more often; init_overlap's warm-up process compiles, its thread loads data). A run
#: whose switch leaves a component alone is a control for that component.
TOUCHES = {**{opt: frozenset({component}) for opt, component in OWN_COMPONENT.items()},
           "init_overlap": frozenset({"trainer_init", "pt2_compiler", "data_ingestion"}),
           "recovery": frozenset({"reliability", "checkpointing"})}
PUBLISH_WAIT_S = 180.0


@dataclass(frozen=True)
class Plan:
    """One benchmark plan: the trainer flags every profile shares."""

    name: str
    steps: int
    batch_size: int
    embedding_rows: int
    embedding_dim: int
    checkpoint_every: int
    mtbf: float
    restart_delay: float
    eval_batches: int
    nproc_per_node: int = 1
    device: str = "cpu"

    @property
    def fail_at_steps(self) -> tuple[int, int]:
        return (self.steps * 3 // 10, self.steps * 7 // 10)

    @property
    def last_batch_size(self) -> int:
        return max(2, self.batch_size * 3 // 4)

    def trainer_flags(self) -> list[str]:
        return ["--steps", str(self.steps), "--batch-size", str(self.batch_size),
                "--last-batch-size", str(self.last_batch_size),
                "--embedding-rows", str(self.embedding_rows),
                "--embedding-dim", str(self.embedding_dim),
                "--checkpoint-every", str(self.checkpoint_every), "--mtbf", str(self.mtbf),
                "--restart-delay", str(self.restart_delay),
                "--eval-batches", str(self.eval_batches),
                "--fail-at-steps", ",".join(map(str, self.fail_at_steps)),
                "--max-restarts", "3", "--publish", "--log-every", "500",
                "--nproc-per-node", str(self.nproc_per_node), "--device", self.device]


#: 10 to 16 minutes of baseline wall time on 2 cores (17 to 30 ms a step, measured on two
#: days of the same machine kind; the whole ablation is then 2 to 3 hours). The baseline checkpoints
#: every 4,000 steps (~70 s, a quarter of the 300-s MTBF: a fixed interval of the kind fleets
#: set by hand); ``recovery`` replaces it with Young/Daly's from the measured checkpoint cost.
DEFAULT = Plan("default", steps=24_000, batch_size=512, embedding_rows=50_000,
               embedding_dim=64, checkpoint_every=4_000, mtbf=300.0, restart_delay=5.0,
               eval_batches=4)
QUICK = Plan("quick", steps=400, batch_size=64, embedding_rows=2_000, embedding_dim=16,
             checkpoint_every=150, mtbf=20.0, restart_delay=1.0, eval_batches=1)


def fail(message: str) -> NoReturn:
    print(f"python -m bench.lifecycle: error: {message}", file=sys.stderr)
    raise SystemExit(2)


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.lifecycle", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.error = fail  # type: ignore[method-assign]  # one line, no usage dump
    parser.add_argument("--quick", action="store_true", help="the small plan")
    parser.add_argument("--steps", type=int, default=None, help="override the plan's steps")
    parser.add_argument("--repeats", type=int, default=None,
                        help="runs of each profile, interleaved in pairs of alternating order "
                             "(default: 2, 1 with --quick)")
    parser.add_argument("--cold-store-run", action=argparse.BooleanOptionalAction,
                        default=None,
                        help="first, one optimized run against the emptied compile store (the "
                             "first job of the model), which fills it for the runs after it; "
                             "shown beside the optimized runs, not in their median (default: "
                             "on when --repeats is 2 or more)")
    parser.add_argument("--ablation", action=argparse.BooleanOptionalAction, default=False,
                        help="also run each optimization alone (about two more hours on 2 "
                             "cores; default: off)")
    parser.add_argument("--only", default=None, metavar="A,B",
                        help="ablation: only these optimizations")
    parser.add_argument("--nproc-per-node", type=int, default=1, help="ranks per run")
    parser.add_argument("--device", choices=DEVICES, default="cpu",
                        help="the trainer's --device for every run; auto = cuda when available "
                             "(default: %(default)s)")
    parser.add_argument("--work-dir", default="var/bench-lifecycle",
                        help="spools, checkpoints and reports (each run's folder is emptied before "
                             "it runs; default: %(default)s)")
    parser.add_argument("--out", default=None, help="also write the tables to this file")
    parser.add_argument("--resume", action="store_true",
                        help="reuse each run a previous invocation finished in --work-dir with "
                             "the very same command (its report.json); run only the others")
    parser.add_argument("--plan-only", action="store_true",
                        help="print the plan and commands; run nothing")
    args = parser.parse_args(argv)
    if args.steps is not None and args.steps < 10:
        fail(f"--steps {args.steps}: at least 10 (failures go at 30% and 70%)")
    if args.repeats is None:
        args.repeats = 1 if args.quick else 2
    if args.repeats < 1:
        fail(f"--repeats {args.repeats}: must be at least 1")
    if args.cold_store_run is None:
        args.cold_store_run = args.repeats >= 2
    if args.nproc_per_node < 1:
        fail(f"--nproc-per-node {args.nproc_per_node}: must be at least 1")
    only = tuple(x.strip() for x in (args.only or "").split(",") if x.strip())
    unknown = [x for x in only if x not in OPTIMIZATIONS]
    if unknown:
        fail(f"--only: unknown optimization {unknown[0]!r}; known: {','.join(OPTIMIZATIONS)}")
    args.only = only or OPTIMIZATIONS
    try:  # resolved once, so the plan (and its JSON) names the device the runs really use
        args.device = resolve_device(args.device)
    except ValueError as exc:
        fail(str(exc))
    return args


def build_plan(args: argparse.Namespace) -> Plan:
    plan = QUICK if args.quick else DEFAULT
    changes: dict[str, Any] = {"nproc_per_node": args.nproc_per_node, "device": args.device}
    if args.steps is not None:
        changes["steps"] = args.steps
        changes["checkpoint_every"] = max(1, min(plan.checkpoint_every, args.steps // 3))
    return Plan(**{**asdict(plan), **changes})


def runs_of(plan: Plan, repeats: int, cold_store_run: bool, ablation: bool,
            only: tuple[str, ...]) -> list[tuple[str, list[str]]]:
    """(run name, extra trainer flags) for every run of the benchmark, in the order they run.

    The optional cold-store run comes first (the first job of the model fills the store); then
    the profiles in pairs whose order alternates (baseline, optimized, optimized, baseline,
    ...), so that a drift of the machine's load falls on both profiles alike; the ablation
    last.
    """
    profiles = {"baseline": ["--profile", "baseline"], "optimized": ["--profile", "optimized"]}
    runs = [(COLD_RUN, profiles["optimized"])] if cold_store_run else []
    for i in range(1, repeats + 1):
        order = ("baseline", "optimized") if i % 2 else ("optimized", "baseline")
        runs += [(f"{profile}-{i}", profiles[profile]) for profile in order]
    if ablation:
        runs += [(f"only-{name}", ["--opt", name]) for name in only]
    return runs


COLD_RUN = "optimized-cold"
STORE = "compile-store"


def profile_of(name: str) -> str:
    """``baseline-2`` -> ``baseline``; ``optimized-cold`` -> ``optimized``; ``only-X`` stays."""
    return name if name.startswith("only-") else name.split("-", 1)[0]


def command(plan: Plan, name: str, extra: list[str], work: Path) -> list[str]:
    return [sys.executable, "-m", "trainer", "--job", f"lifecycle-{plan.name}-{name}",
            "--spool-dir", str(work / name / "spool"),
            "--checkpoint-dir", str(work / name / "checkpoints"),
            "--compile-store", str(work / STORE),
            *plan.trainer_flags(), *extra]


REPORT = "report.json"


def finished_run(plan: Plan, name: str, extra: list[str], work: Path) -> dict[str, Any] | None:
    """The record a previous invocation kept for this run, if it ran the very same command."""
    try:
        kept = json.loads((work / name / REPORT).read_text())
    except (OSError, ValueError):
        return None
    if kept.get("command") != command(plan, name, extra, work):
        return None
    return {"job": kept["job"], "load_average": kept.get("load_average"),
            "store": kept.get("store", "none")}


class LoadSampler:
    """The 1-minute load average, sampled every few seconds while a run runs: the machine's
    mood during that run, printed beside its ETT%."""

    def __init__(self, every_s: float = 5.0) -> None:
        self.every_s = every_s
        self.samples: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while True:
            self.samples.append(os.getloadavg()[0])
            if self._stop.wait(self.every_s):
                return

    def __enter__(self) -> LoadSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    @property
    def mean(self) -> float:
        return round(statistics.fmean(self.samples), 2) if self.samples else 0.0


#: The outcome of a job's store fetch (its ``store_fetch`` span) -> the run's label.
STORE_STATES = {"hit": "warm", "miss": "cold", "damaged": "damaged"}


def store_state(spool: Path) -> str:
    """``warm`` / ``cold`` / ``damaged``: what the run's first attempt found in the compile
    store, read from the ``store_fetch`` span the supervisor reported (``none``: no fetch,
    e.g. a profile without ``compile_cache``). Why the span and not a look at the store's
    folder: an entry for another key (an ablation run's own config) is no hit."""
    for path in sorted(spool.glob("*.jsonl")):
        for _end, payload, _problem in read_records(path, final=True):
            event = json.loads(payload) if payload else {}
            if event.get("phase") == "compile" and \
                    event.get("attrs", {}).get("stage") == "store_fetch":
                return STORE_STATES.get(event["attrs"].get("store"), "none")
    return "none"


def run_one(plan: Plan, name: str, extra: list[str], work: Path) -> dict[str, Any]:
    """One supervised job, then its offline report (ETT_SPEC §5) entry, kept for ``--resume``."""
    shutil.rmtree(work / name, ignore_errors=True)
    env = {key: value for key, value in os.environ.items()
           if key not in ("TORCHINDUCTOR_CACHE_DIR", "TORCH_COMPILE_JOB_ID",
                          compile_store.STORE_ENV)}
    started = time.monotonic()
    log = (work / f"{name}.log")
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w") as out, LoadSampler() as load:
        code = subprocess.call(command(plan, name, extra, work), cwd=REPO, env=env,
                               stdout=out, stderr=subprocess.STDOUT)
        if code == 0:
            wait_for_publish(work / name / "checkpoints", plan.steps)
    if code != 0:
        raise SystemExit(f"bench.lifecycle: run {name} exited {code}; see {log}")
    spool = sorted(str(p) for p in (work / name / "spool").glob("*.jsonl"))
    report = json.loads(subprocess.run(
        [sys.executable, "-m", "ettweb.attribution", *spool], cwd=REPO, check=True,
        capture_output=True, text=True).stdout)
    if report["rejected"]:
        raise SystemExit(f"bench.lifecycle: {name}: rejected events {report['rejected'][:3]}")
    (job,) = report["jobs"]
    store = store_state(work / name / "spool")
    print(f"  {name}: {time.monotonic() - started:.0f} s, ETT {job['ett_pct']:.2f}%, "
          f"store {store}, load {load.mean}", file=sys.stderr, flush=True)
    record = {"job": dict(job), "load_average": load.mean, "store": store}
    (work / name / REPORT).write_text(json.dumps(
        {"command": command(plan, name, extra, work), **record}))
    return record


def wait_for_publish(checkpoints: Path, steps: int) -> None:
    """The out-of-band publisher outlives the job; its artifact marks the end of its span."""
    artifact = checkpoints / "published" / f"step-{steps:08d}.pt2"
    deadline = time.monotonic() + PUBLISH_WAIT_S
    while not artifact.exists() and time.monotonic() < deadline:
        time.sleep(0.5)
    time.sleep(0.5)  # its Reporter flushes after the rename


def profile_table(name: str, job: dict[str, Any]) -> list[str]:
    recover = ", ".join(f"{v:.1f}" for v in job["time_to_recover_s"]) or "-"
    lines = [f"== {name}",
             f"  ETT%              {job['ett_pct']:.2f}",
             f"  wall              {job['wall_s']:.1f} s  (productive {job['productive_s']:.1f} s)",
             f"  time to start     {job['time_to_start_s']:.1f} s",
             f"  time to recover   {recover} s",
             f"  failures          {job['failures']}  repeated steps {job['repeated_steps']}",
             "  lost time by component (s):"]
    for component, seconds in sorted(job["lost_by_component_s"].items(), key=lambda kv: -kv[1]):
        lines.append(f"    {component:<20} {seconds:9.2f}")
    return lines


#: Within this fraction of the control a change is a tie: runs on a shared machine vary by a
#: few percent, and "6.61 s < 6.63 s" must not read as an effect.
TIE_FRACTION = 0.05


def ablation_verdict(alone_s: float, control_s: list[float]) -> str:
    """``lower`` only when ``alone_s`` is more than a tie below every control run (the baseline
    and the runs that leave the component alone); ``NOT lower`` when more than a tie above
    every one of them; otherwise a ``tie``.

    Why the whole control and not the baseline alone: the baseline is one run, and a machine
    that drifts during a 2.5-hour ablation (measured: trainer_init 4.30 to 6.83 s, pt2_compiler
    48.4 to 68.1 s across runs that do not act on them) can make any switch look better or
    worse than it is. A switch has an effect only if it lands outside what noise alone did.
    """
    if alone_s < min(control_s) * (1 - TIE_FRACTION):
        return "lower"
    if alone_s > max(control_s) * (1 + TIE_FRACTION):
        return "NOT lower"
    return "tie"


def control_seconds(component: str, baseline: dict[str, Any],
                    results: dict[str, dict[str, Any]]) -> list[float]:
    """``component``'s lost seconds in the baseline and in every run whose switch leaves it
    alone (:data:`TOUCHES`): how much it varies when nothing acts on it."""
    return [job["lost_by_component_s"].get(component, 0.0)
            for opt, job in [("", baseline), *results.items()]
            if not opt or component not in TOUCHES[opt]]


@dataclass(frozen=True)
class AblationRow:
    """One switch alone on its own component, with the control it is judged against."""

    opt: str
    component: str
    baseline_s: float
    control_s: tuple[float, ...]
    alone_s: float

    @property
    def verdict(self) -> str:
        return ablation_verdict(self.alone_s, list(self.control_s))


def ablation_rows(baseline: dict[str, Any],
                  results: dict[str, dict[str, Any]]) -> list[AblationRow]:
    rows = []
    for opt, job in results.items():
        component = OWN_COMPONENT[opt]
        rows.append(AblationRow(opt, component,
                                baseline["lost_by_component_s"].get(component, 0.0),
                                tuple(control_seconds(component, baseline, results)),
                                job["lost_by_component_s"].get(component, 0.0)))
    return rows


def ablation_table(baseline: dict[str, Any], results: dict[str, dict[str, Any]],
                   device: str = "cpu") -> list[str]:
    lines = ["== ablation: each optimization alone vs the control (its own component, s): the "
             "baseline and every run whose switch leaves that component alone; "
             f"within {TIE_FRACTION:.0%} of the control's range is a tie",
             f"  {'optimization':<18} {'component':<18} {'baseline':>9} {'control':>15} "
             f"{'alone':>9} {'change':>9} {'ETT%':>7} {'start s':>8}"]
    for row in ablation_rows(baseline, results):
        job = results[row.opt]
        control = f"{min(row.control_s):.2f}-{max(row.control_s):.2f}"
        lines.append(f"  {row.opt:<18} {row.component:<18} {row.baseline_s:9.2f} "
                     f"{control:>15} {row.alone_s:9.2f} {row.verdict:>9} "
                     f"{job['ett_pct']:7.2f} {job['time_to_start_s']:8.1f}")
    lines.append(f"  {'(none: baseline)':<18} {'':<18} {'':>9} {'':>15} {'':>9} {'':>9} "
                 f"{baseline['ett_pct']:7.2f} {baseline['time_to_start_s']:8.1f}")
    for component in sorted({OWN_COMPONENT[opt] for opt in results}):
        runs = len(control_seconds(component, baseline, results))
        lines.append(f"  control for {component}: {runs} run(s)")
    if device == "cpu":
        lines.append("  note: on CPU, training has nothing to autotune (inductor's C++ GEMM "
                     "templates need constant weights), so autotune_pruning's number is noise; "
                     "run it with --device cuda")
    return lines


@dataclass(frozen=True)
class ProfileRuns:
    """Every run of one profile: the median, the range, and the run to show in full."""

    profile: str
    names: tuple[str, ...]
    ett_pct: tuple[float, ...]

    @property
    def median(self) -> float:
        return round(statistics.median(self.ett_pct), 2)

    @property
    def low(self) -> float:
        return min(self.ett_pct)

    @property
    def high(self) -> float:
        return max(self.ett_pct)

    @property
    def median_run(self) -> str:
        """The run whose ETT% is the (lower) median: the one whose components are printed."""
        value = statistics.median_low(self.ett_pct)
        return self.names[self.ett_pct.index(value)]


def profile_runs(profile: str, results: dict[str, dict[str, Any]]) -> ProfileRuns:
    """The interleaved runs of ``profile``. The cold-store run is left out and shown on its
    own: it answers another question (what the first job of a model pays, once per model and
    torch version), and in the headline it would stand for every later job of the fleet."""
    names = tuple(name for name in results
                  if profile_of(name) == profile and name != COLD_RUN)
    return ProfileRuns(profile, names, tuple(results[n]["job"]["ett_pct"] for n in names))


def verdict(baseline: ProfileRuns, optimized: ProfileRuns) -> str:
    """``gain`` only when every optimized run beats every baseline run: overlapping ranges
    cannot tell an effect from the machine's mood, and one run per profile has no range."""
    if len(baseline.names) < 2 or len(optimized.names) < 2:
        return "no call: one run of a profile has no range (--repeats 2 or more)"
    if optimized.low > baseline.high:
        return "gain"
    if optimized.high < baseline.low:
        return "loss"
    return "no call: the ranges overlap"


def runs_table(results: dict[str, dict[str, Any]]) -> list[str]:
    lines = ["== runs, in the order they ran",
             f"  {'run':<16} {'store':>6} {'ETT%':>7} {'wall s':>8} {'start s':>8} "
             f"{'pt2 s':>7} {'repeat':>7} {'load':>5}"]
    for name, run in results.items():
        job = run["job"]
        pt2 = job["lost_by_component_s"].get("pt2_compiler", 0.0)
        lines.append(f"  {name:<16} {run['store']:>6} {job['ett_pct']:7.2f} "
                     f"{job['wall_s']:8.1f} {job['time_to_start_s']:8.1f} {pt2:7.1f} "
                     f"{job['repeated_steps']:7d} {run['load_average'] or 0:5.2f}")
    return lines


def run_summary(name: str, run: dict[str, Any]) -> dict[str, Any]:
    job = run["job"]
    return {"name": name, "profile": profile_of(name), "store": run["store"],
            "ett_pct": job["ett_pct"], "wall_s": round(job["wall_s"], 1),
            "time_to_start_s": round(job["time_to_start_s"], 1),
            "pt2_compiler_s": round(job["lost_by_component_s"].get("pt2_compiler", 0.0), 1),
            "lost_by_component_s": {k: round(v, 2) for k, v in
                                    sorted(job["lost_by_component_s"].items())},
            "load_average": run["load_average"]}


def alone_runs(results: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The ablation's runs: optimization -> its job's report entry."""
    return {n.removeprefix("only-"): run["job"] for n, run in results.items()
            if n.startswith("only-")}


def summary(results: dict[str, dict[str, Any]], plan: Plan) -> dict[str, Any]:
    baseline, optimized = profile_runs("baseline", results), profile_runs("optimized", results)
    base, best = baseline.median, optimized.median
    alone = alone_runs(results)
    walls = {p.profile: statistics.median(results[n]["job"]["wall_s"] for n in p.names)
             for p in (baseline, optimized)}
    return {"plan": plan.name, "device": plan.device, "steps": plan.steps,
            "fail_at_steps": list(plan.fail_at_steps),
            "order": list(results),
            "baseline_ett_pct": base, "optimized_ett_pct": best,
            "baseline_range": [baseline.low, baseline.high],
            "optimized_range": [optimized.low, optimized.high],
            "ratio": round(best / base, 4) if base else None,
            "relative_gain_pct": round(100 * (best / base - 1), 2) if base else None,
            "points": round(best - base, 2),
            "verdict": verdict(baseline, optimized),
            # ETT% counts a slower step as more productive time: the wall time of the same work
            # (same steps, same failures) says whether the job really finished sooner.
            "baseline_wall_s": round(walls["baseline"], 1),
            "optimized_wall_s": round(walls["optimized"], 1),
            "cold_store_ett_pct": results[COLD_RUN]["job"]["ett_pct"] if COLD_RUN in results
            else None,
            "runs": [run_summary(n, run) for n, run in results.items()],
            "ablation": {row.opt: row.verdict for row in
                         ablation_rows(results[baseline.median_run]["job"], alone)},
            "load_average": list(os.getloadavg())}


def summary_lines(result: dict[str, Any]) -> list[str]:
    lines = ["== summary (ETT%: median, min-max over the interleaved runs of each profile)"]
    for profile in ("baseline", "optimized"):
        low, high = result[f"{profile}_range"]
        lines.append(f"  {profile:<10} median {result[f'{profile}_ett_pct']:6.2f}   "
                     f"range {low:.2f}-{high:.2f}   median wall {result[f'{profile}_wall_s']} s")
    lines.append(f"  ratio of medians {result['ratio']} ({result['relative_gain_pct']:+.2f}%, "
                 f"{result['points']:+.2f} points): {result['verdict']}")
    cold = [r for r in result["runs"] if r["store"] == "cold"]
    warm = [r for r in result["runs"] if r["store"] == "warm" and r["profile"] == "optimized"]
    if cold and warm:
        lines.append(f"  compile store: the first job of the model (cold store) "
                     f"{cold[0]['ett_pct']}%, starts in {cold[0]['time_to_start_s']} s, "
                     "pt2_compiler "
                     f"{cold[0]['pt2_compiler_s']} s; the next ones (warm store, median) "
                     f"{statistics.median(r['ett_pct'] for r in warm):.2f}%, start in "
                     f"{statistics.median(r['time_to_start_s'] for r in warm):.1f} s, "
                     f"pt2_compiler {statistics.median(r['pt2_compiler_s'] for r in warm):.1f} s")
    return lines


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    plan = build_plan(args)
    work = Path(args.work_dir).absolute()
    runs = runs_of(plan, args.repeats, args.cold_store_run, args.ablation, args.only)
    for name, extra in runs:  # an impossible plan stops here, before any run starts
        launch.parse(command(plan, name, extra, work)[3:])
    if args.plan_only:
        print(json.dumps({"plan": asdict(plan), "fail_at_steps": list(plan.fail_at_steps),
                          "runs": [{"name": n, "command": command(plan, n, e, work)}
                                   for n, e in runs]}))
        return 0
    if not args.resume:  # the first job of the model finds the store empty
        shutil.rmtree(work / STORE, ignore_errors=True)
    results = {}
    for number, (name, extra) in enumerate(runs, 1):
        kept = finished_run(plan, name, extra, work) if args.resume else None
        if kept is not None:
            print(f"  {name}: reused from {work / name / REPORT}", file=sys.stderr, flush=True)
        else:
            print(f"[{number}/{len(runs)}] {name} ...", file=sys.stderr, flush=True)
        results[name] = kept if kept is not None else run_one(plan, name, extra, work)
    result = summary(results, plan)
    lines = runs_table(results)
    baseline, optimized = profile_runs("baseline", results), profile_runs("optimized", results)
    for profile in (baseline, optimized):
        lines += profile_table(f"{profile.profile}: its median run, {profile.median_run}",
                               results[profile.median_run]["job"])
    if alone := alone_runs(results):
        lines += ablation_table(results[baseline.median_run]["job"], alone, plan.device)
    lines += summary_lines(result)
    text = "\n".join([*lines, json.dumps(result)])
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
