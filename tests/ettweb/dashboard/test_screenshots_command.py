"""``manage.py ett_screenshots`` against a live server: one PNG per page, and a page that
fails is named rather than photographed."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command
from pytest_django.live_server_helper import LiveServer

from ettweb.rollouts.models import Rollout
from tests.ettweb.components.fleet import ingest_fleet


@pytest.fixture
def fleet(transactional_db: None) -> None:
    ingest_fleet()
    User.objects.create_superuser("shooter", "shooter@example.test", "pw-shots-1")
    from datetime import UTC, datetime

    Rollout.objects.create(name="plan cache", component="pt2_compiler",
                           at=datetime(2026, 3, 2, 12, tzinfo=UTC))


@pytest.mark.browser
@pytest.mark.timeout(180)
def test_every_page_is_photographed(fleet: None, live_server: LiveServer,
                                    tmp_path: Path) -> None:
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"  # live_server's teardown beside playwright
    try:
        call_command("ett_screenshots", base_url=live_server.url, out=str(tmp_path))
    finally:
        os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
    names = sorted(p.name for p in tmp_path.glob("page-*.png"))
    assert names == sorted(f"page-{n}.png" for n in (
        "jobs", "fleet", "job", "components", "component", "rollouts", "rollout",
        "changes", "collectors", "report"))
    assert all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and p.stat().st_size > 20_000
               for p in tmp_path.glob("page-*.png"))


@pytest.mark.django_db
def test_without_rollups_or_a_user_it_says_what_to_do(tmp_path: Path) -> None:
    with pytest.raises(CommandError, match="no superuser"):
        call_command("ett_screenshots", out=str(tmp_path))
    User.objects.create_superuser("shooter", "shooter@example.test", "pw-shots-1")
    with pytest.raises(CommandError, match="no job has rollups yet"):
        call_command("ett_screenshots", out=str(tmp_path))
