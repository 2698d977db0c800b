"""Owners edit the phase→component map in the admin; operators rebuild rollups by command."""

from __future__ import annotations

from datetime import date
from io import StringIO

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import Client

from ettweb.ingest.batches import ingest_lines
from ettweb.queries import DateRange, LostByComponentQuery, calculate
from ettweb.rollups.models import JobRollup, PhaseComponent

pytestmark = pytest.mark.django_db
ALL_OF_1970 = DateRange(date(1970, 1, 1), date(1970, 12, 31))


def test_admin_edit_of_a_phase_component_takes_effect_at_once(
        client: Client, worked_example_lines: list[str]) -> None:
    ingest_lines(worked_example_lines)
    call_command("ett_rebuild_rollups", stdout=StringIO())
    before = {c.component: c.gpu_s for c in calculate(LostByComponentQuery(ALL_OF_1970)).components}
    assert before["pt2_compiler"] == 24.0  # compile 6 s x 4 GPUs
    client.force_login(User.objects.create_superuser("admin", "a@example.com", "pw-admin-1"))
    row = PhaseComponent.objects.get(phase="compile")
    response = client.post(f"/admin/rollups/phasecomponent/{row.pk}/change/",
                           {"phase": "compile", "component": "trainer_init"})
    assert response.status_code == 302
    after = {c.component: c.gpu_s for c in calculate(LostByComponentQuery(ALL_OF_1970)).components}
    assert "pt2_compiler" not in after
    assert after["trainer_init"] == before.get("trainer_init", 0.0) + 24.0


def test_seeded_map_is_the_spec_default() -> None:
    from ettweb.attribution.components import DEFAULT_PHASE_COMPONENTS

    assert dict(PhaseComponent.objects.values_list("phase", "component")) == \
        DEFAULT_PHASE_COMPONENTS


def test_rebuild_command_fills_rollups_for_events_stored_before_them(
        worked_example_lines: list[str], one_gpu_job_lines: list[str]) -> None:
    ingest_lines(worked_example_lines + one_gpu_job_lines)  # no refresh: pre-rollup data
    assert not JobRollup.objects.exists()
    out = StringIO()
    call_command("ett_rebuild_rollups", stdout=out)
    assert out.getvalue().startswith("rebuilt 2 jobs from 15 events:")
    assert sorted(JobRollup.objects.values_list("job", "wall_s")) == [("j1", 113.0),
                                                                       ("j2", 100.0)]
