"""``ettweb.platform.deferred``: what a GET sends the worker goes through the real broker once
per key and interval, and a broker that refuses costs the page nothing but a log line."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from kombu.exceptions import OperationalError

from ettweb.celery import app
from ettweb.ingest.batches import ingest_lines
from ettweb.platform import deferred
from tests.ettweb.attribution.attribution_events import worked_example
from tests.ettweb.queued import QueuedTask


def test_a_task_is_sent_once_per_key_and_interval(
        queued: Callable[[], list[QueuedTask]]) -> None:
    assert deferred.send_once("ett.refresh_outdated_rollups", [["a"]], within_s=60)
    assert not deferred.send_once("ett.refresh_outdated_rollups", [["a"]], within_s=60)
    assert deferred.send_once("ett.refresh_outdated_rollups", [["b"]], within_s=60)
    assert deferred.send_once("ett.note_token_used", [1, "t1"], within_s=60, key="token 1")
    assert not deferred.send_once("ett.note_token_used", [1, "t2"], within_s=60, key="token 1")
    assert deferred.send_once("ett.refresh_outdated_rollups", [["a"]], within_s=0)  # expired
    assert queued() == [QueuedTask("ett.refresh_outdated_rollups", [["a"]]),
                        QueuedTask("ett.refresh_outdated_rollups", [["b"]]),
                        QueuedTask("ett.note_token_used", [1, "t1"]),
                        QueuedTask("ett.refresh_outdated_rollups", [["a"]])]


@pytest.fixture
def refusing_broker(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The broker down: every send raises as kombu does when Redis refuses the connection."""
    tried: list[str] = []

    def send_task(name: str, *args: Any, **kwargs: Any) -> None:
        tried.append(name)
        raise OperationalError("Error 111 connecting to 127.0.0.1:6379. Connection refused.")

    monkeypatch.setattr(app, "send_task", send_task)
    return tried


def test_a_refused_send_is_logged_and_asked_again_by_the_next_request(
        refusing_broker: list[str], queued: Callable[[], list[QueuedTask]],
        caplog: pytest.LogCaptureFixture) -> None:
    assert not deferred.send_once("ett.warm_rollout_impact", [1, 3], within_s=60)
    assert not deferred.send_once("ett.warm_rollout_impact", [1, 3], within_s=60)
    assert refusing_broker == ["ett.warm_rollout_impact"] * 2  # not remembered as sent
    assert "could not send ett.warm_rollout_impact(1, 3) to the worker" in caplog.text


@pytest.mark.django_db
def test_a_page_answers_while_the_broker_is_down(
        refusing_broker: list[str], queued: Callable[[], list[QueuedTask]]) -> None:
    ingest_lines(worked_example().lines())
    client = Client()
    client.force_login(User.objects.create_user("vic"))
    page = client.get("/jobs/j1/")
    assert page.status_code == 200 and 'id="job-computing"' in page.content.decode()
    assert client.get("/api/v1/jobs/j1").status_code == 202
    assert refusing_broker == ["ett.refresh_outdated_rollups"] * 2
