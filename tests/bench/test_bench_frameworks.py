"""bench.integration_stages.frameworks: the callbacks' per-step cost beside a bare loop.

The per-step cost is held to the issue's target (1% of a 20 ms step), which a callback that
emitted or locked per step would break by far; the emit latency is measured, never asserted
(a shared machine's scheduler decides its tail).
"""

from __future__ import annotations

from bench.integration_stages.frameworks import OVERHEAD_TARGET_PCT, measure_callbacks


def test_each_callback_costs_a_step_a_few_microseconds() -> None:
    result = measure_callbacks(steps=2000)
    assert result["steps"] == 2000 and result["step_ms"] == 20.0
    for name in ("lightning", "transformers"):
        figures = result[name]
        assert figures["blocks"] == 10  # 2000 steps in blocks of 200, each beside a bare one
        assert 0 < figures["hooks_p50_us"] <= figures["hooks_p99_us"]
        assert figures["pct_of_step"] <= OVERHEAD_TARGET_PCT, figures
        assert figures["events_dropped"] == 0
    assert 0 < result["emit_p50_us"] <= result["emit_p99_us"]
    assert isinstance(result["meets_targets"], bool)


def test_the_bench_leaves_no_compile_callbacks_behind() -> None:
    from torch._dynamo.callback import callback_handler

    before = (len(callback_handler.start_callbacks), len(callback_handler.end_callbacks))
    measure_callbacks(steps=400)
    after = (len(callback_handler.start_callbacks), len(callback_handler.end_callbacks))
    assert after == before
