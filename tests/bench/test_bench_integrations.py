"""``python -m bench.integrations``: its stages, its lines, and its last line of JSON."""

from __future__ import annotations

import argparse
import json

import pytest

from bench import integrations


def test_the_importers_stage_prints_rates_and_one_json_object(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert integrations.main(["--quick", "--stage", "importers"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0].startswith("importers: nvrx ")
    result = json.loads(lines[-1])
    rates = {fmt: r["events_per_s"] for fmt, r in result["importers"].items()
             if isinstance(r, dict)}
    assert set(rates) == {"nvrx", "goodput", "torchtitan"}
    assert all(rate > 0 for rate in rates.values())
    assert result["meets_targets"] is False  # no stage with targets ran: nothing was met


def test_a_stage_that_cannot_import_says_why_and_the_others_run(
        monkeypatch: pytest.MonkeyPatch) -> None:
    def missing(args: argparse.Namespace) -> dict[str, object]:
        raise ImportError("no lightning", name="lightning")

    monkeypatch.setitem(integrations.STAGES, "frameworks", missing)
    result = integrations.run_stage("frameworks", argparse.Namespace())
    assert result["skipped"].startswith("cannot import lightning")
    assert integrations.summary_line("frameworks", result).startswith("frameworks: skipped")
