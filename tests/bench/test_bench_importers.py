"""The importers' stage of ``bench.integrations``: every format is timed on a synthetic file
of its own and gives a positive rate (no speed is asserted: this machine is shared)."""

from __future__ import annotations

from bench.integration_stages.importers import SYNTHETIC, measure_importers
from ettweb.importers.common import Options
from ettweb.importers.formats import TRANSLATORS


def test_each_importer_reports_a_positive_rate() -> None:
    results = measure_importers(200)
    assert set(results) == set(TRANSLATORS)
    for fmt, numbers in results.items():
        assert numbers["events"] >= 100, fmt  # about the events asked for
        assert numbers["lines"] > 0 and numbers["seconds"] > 0
        assert numbers["events_per_s"] == numbers["events"] / numbers["seconds"] > 0


def test_the_synthetic_files_are_read_whole_without_rejections() -> None:
    for fmt, make in SYNTHETIC.items():
        translation = TRANSLATORS[fmt](make(50), Options(source="bench"))
        assert translation.rejected == [] and translation.skipped == 0, fmt
