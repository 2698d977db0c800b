"""Rollout impacts around the timing: beat's warm pass before it, a cold window after it.

Why before: in production beat's warm pass computes every rollout's impact at the windows
the rollout page links to and stores its bootstrap draws, so a request finds them in the
table; the bench runs that pass once and forgets this process's own draws, so requests find
them where a web server would. Why after: a window no warm pass computes is drawn afresh on
its first request; ``cold_impacts`` prices that case beside the pages, not in their target.
"""

from __future__ import annotations

import time
from typing import Any, Final

from bench.dashboard_stages import say
from bench.dashboard_stages.timing import bench_client
from bench.rollouts import percentile

#: Windows no warm pass computes (``cold_impacts`` checks them against WARM_WINDOWS).
COLD_WINDOWS: Final = (21, 45)


def warm_as_beat_does() -> dict[str, Any]:
    """Run beat's warm pass (``ett.warm_rollout_impacts``) once, then forget this process's
    own draws: the measured requests find them where a web server would, in the table."""
    from ettweb.queries.impact import draws as impact_draws
    from ettweb.rollouts.warm import WARM_WINDOWS, warm_impacts

    stats = warm_impacts()
    impact_draws._DRAWS.clear()
    say(f"warm pass (as beat runs it): {stats.impacts} impacts in {stats.seconds:.1f} s")
    return {"impacts": stats.impacts, "seconds": round(stats.seconds, 1),
            "windows": list(WARM_WINDOWS)}


def cold_impacts() -> dict[str, Any]:
    """What a window nobody computed ahead costs: every rollout's impact at
    ``COLD_WINDOWS`` through the API (server time), with the stored draws neither read nor
    written and this process's emptied before each request, so every one draws afresh.
    Reported beside the pages, not part of their target: it is the first request's price
    for a window the page does not link to."""
    from ettweb.queries.impact import draws as impact_draws
    from ettweb.rollouts.models import Rollout
    from ettweb.rollouts.warm import WARM_WINDOWS

    if set(COLD_WINDOWS) & set(WARM_WINDOWS):
        raise RuntimeError(f"cold windows {COLD_WINDOWS} overlap the warmed {WARM_WINDOWS}")
    client, _, token = bench_client()
    samples: list[float] = []
    stored = impact_draws._stored_draws  # a request never stores draws: hiding them is enough
    impact_draws._stored_draws = lambda key: None
    try:
        for rollout_id in Rollout.objects.order_by("id").values_list("id", flat=True):
            for window in COLD_WINDOWS:
                impact_draws._DRAWS.clear()
                url = f"/api/v1/rollouts/{rollout_id}/impact?window={window}"
                began = time.perf_counter()
                response = client.get(url, HTTP_AUTHORIZATION=f"Bearer {token}")
                samples.append((time.perf_counter() - began) * 1000)
                if response.status_code != 200:
                    raise RuntimeError(f"{url}: HTTP {response.status_code}")
    finally:
        impact_draws._stored_draws = stored
    row = {"windows": list(COLD_WINDOWS), "requests": len(samples),
           "p50_ms": round(percentile(samples, 50), 1),
           "p95_ms": round(percentile(samples, 95), 1)}
    say(f"cold impacts (windows {COLD_WINDOWS}, drawn afresh): p50 {row['p50_ms']} ms, "
         f"p95 {row['p95_ms']} ms")
    return row
