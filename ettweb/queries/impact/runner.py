"""The impact query's runner: one rollout's windows read, drawn and judged into a result.

It only orders the steps (:mod:`.windows`, :mod:`.reading`, :mod:`.draws`,
:mod:`.verdicts`, :mod:`.overlaps`); each step's reasons live in its module.
"""

from __future__ import annotations

from typing import Final

from ettweb.platform.deferred import send_once
from ettweb.queries.impact.draws import group_draws
from ettweb.queries.impact.overlaps import overlapping
from ettweb.queries.impact.reading import read_windows
from ettweb.queries.impact.result import ImpactQuery, ImpactResult, RolloutInfo
from ettweb.queries.impact.verdicts import (
    adjusted_effect,
    component_effect,
    component_shifts,
    difference,
    group_impact,
    inconclusive_of,
    per_job_ett,
    verdict_of,
)
from ettweb.queries.impact.windows import last_data_day, rollout_windows
from ettweb.queries.registry import runner_for
from ettweb.rollouts.models import Rollout
from ettweb.statistics.estimators import interval

#: The worker's task that keeps one rollout's draws at one window (``ettweb.rollouts.warm``).
WARM_TASK: Final = "ett.warm_rollout_impact"
#: Seconds before another read of the same impact asks the worker again.
ASK_AGAIN_S: Final = 30.0


def _info(rollout: Rollout) -> RolloutInfo:
    return RolloutInfo(id=rollout.pk, name=rollout.name, component=rollout.component,
                       at=rollout.at, scope=rollout.parsed_scope, notes=rollout.notes,
                       link=rollout.link, simulated=rollout.simulated)


@runner_for(ImpactQuery)
class ImpactQueryRunner:
    """Runs an :class:`ImpactQuery`; ``calculate()`` is None for an unknown rollout.

    ``keep``: store the bootstrap draws (the worker's warm pass). Without it, draws found
    missing are computed in memory and the worker is asked to keep them
    (``ett.warm_rollout_impact`` for this rollout and window)."""

    def __init__(self, query: ImpactQuery, *, keep: bool = False) -> None:
        self.query = query
        self.keep = keep

    def calculate(self) -> ImpactResult | None:
        rollout = Rollout.objects.filter(pk=self.query.rollout_id).first()
        if rollout is None:
            return None
        info = _info(rollout)
        window_days = self.query.window_days
        windows = rollout_windows(info.at, window_days, last_data_day())
        read = read_windows(windows, info.scope, info.component,
                            with_trend=self.query.with_trend)
        jobs = read.jobs
        in_scope = jobs.group(jobs.in_scope)
        out_of_scope = None if info.scope.is_fleet else jobs.group(~jobs.in_scope)
        draws, unkept = group_draws(info.id, in_scope, out_of_scope, keep=self.keep)
        if unkept:
            send_once(WARM_TASK, [info.id, window_days], within_s=ASK_AGAIN_S)
        treated = group_impact(in_scope, draws.treated)
        control, did, did_ci = None, None, None
        did_draws = difference(draws.treated, draws.control)
        if out_of_scope is not None:
            control = group_impact(out_of_scope, draws.control)
            if treated.change_pts is not None and control.change_pts is not None:
                did = treated.change_pts - control.change_pts
            if did_draws is not None:
                did_ci = interval(did_draws[:, 0])
        totals = in_scope.totals
        verdict, reason = verdict_of(treated, control, did_ci)
        deciding = did_draws if did_ci is not None else draws.treated
        return ImpactResult(
            rollout=info, window_days=window_days, windows=windows,
            treated=treated, control=control, did_pts=did, did_ci95_pts=did_ci,
            components=component_shifts(read.lost, totals[0], totals[2]),
            treated_before_ett=per_job_ett(in_scope, after=False),
            treated_after_ett=per_job_ett(in_scope, after=True), verdict=verdict,
            verdict_reason=reason,
            component_effect=component_effect(info.component, in_scope, out_of_scope, draws,
                                              treated, windows, window_days),
            adjusted=adjusted_effect(in_scope, out_of_scope, draws, treated, windows,
                                     window_days),
            overlapping=overlapping(info, windows, window_days),
            inconclusive=inconclusive_of(verdict, None if deciding is None else deciding[:, 0],
                                         did if did_ci is not None else treated.change_pts,
                                         windows, window_days),
            trend=read.trend,
        )
