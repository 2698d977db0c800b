"""``manage.py ett_screenshots``: a picture of every dashboard page, as the docs show them.

Why a command and not a test fixture: the README's pictures should show a fleet worth
looking at — the demo's months of simulated jobs and its real TorchRec job — so this runs
against a server that is up (``make demo``), on the database that server reads. It signs a
user in by writing a session for them (no password needed: whoever runs ``manage.py`` can
read the database anyway), opens each page in the system Chromium, waits until every chart
on it is drawn, and saves one PNG per page. A page answering 400 or more, a console error or
a request leaving the server stops the command with the page named: a broken page is not
photographed.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import import_module
from pathlib import Path
from typing import Any
from urllib.parse import quote

from django.conf import settings
from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY
from django.contrib.auth.models import User
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db.models import Sum

from ettweb.queries import phase_components
from ettweb.rollouts.models import Rollout
from ettweb.rollups.models import DailyCategoryRollup, JobRollup

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu",
                 "--disable-background-networking"]
#: Every chart drawn: each figure's div has become a plotly plot.
CHARTS_DRAWN = """() => [...document.querySelectorAll('.plotly-graph-div')]
    .every(d => d.classList.contains('js-plotly-plot'))"""


@dataclass(frozen=True)
class Shot:
    name: str
    path: str
    what: str


class Command(BaseCommand):
    help = ("Save a screenshot of every dashboard page (docs/img/page-*.png) from a running "
            "server, e.g. the one `make demo` serves.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--base-url", default="http://127.0.0.1:8000",
                            help="the running server (default: %(default)s)")
        parser.add_argument("--username",
                            help="whose view to photograph (default: the first superuser)")
        parser.add_argument("--out", default="docs/img", help="folder (default: %(default)s)")
        parser.add_argument("--width", type=int, default=1280, help="viewport width in px")
        parser.add_argument("--height", type=int, default=1000, help="viewport height in px")
        parser.add_argument("--chromium", default=CHROMIUM, help="browser (%(default)s)")

    def handle(self, *args: Any, **options: Any) -> None:
        session = _session_for(_user(options["username"]))  # the ORM before playwright's loop
        shots = pages()
        out = Path(options["out"])
        out.mkdir(parents=True, exist_ok=True)
        try:
            from playwright.sync_api import sync_playwright
        except ImportError as exc:
            raise CommandError("playwright is not installed: `make install-browser`") from exc
        base = options["base_url"].rstrip("/")
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=options["chromium"],
                                                 args=CHROMIUM_ARGS)
            context = browser.new_context(viewport={"width": options["width"],
                                                    "height": options["height"]})
            context.add_cookies([{"name": settings.SESSION_COOKIE_NAME,
                                  "value": session, "url": base}])
            for number, shot in enumerate(shots, start=1):
                target = out / f"page-{shot.name}.png"
                _photograph(context, base, shot, target)
                self.stdout.write(f"[{number}/{len(shots)}] {shot.what}: {shot.path} -> {target}")
            browser.close()


def _user(username: str | None) -> User:
    users = User.objects.filter(is_active=True)
    user = (users.filter(username=username) if username
            else users.filter(is_superuser=True).order_by("pk")).first()
    if user is None:
        raise CommandError(f"no active user named {username!r}" if username else
                           "no superuser: create one with `manage.py ett_login NAME --role "
                           "admin`, or name a user with --username")
    return user


def _session_for(user: User) -> str:
    """A signed-in session for ``user`` in the configured session store; its key."""
    store = import_module(settings.SESSION_ENGINE).SessionStore()
    store[SESSION_KEY] = str(user.pk)
    store[BACKEND_SESSION_KEY] = "django.contrib.auth.backends.ModelBackend"
    store[HASH_SESSION_KEY] = user.get_session_auth_hash()
    store.create()
    return str(store.session_key)


def pages() -> list[Shot]:
    """Every page, with the most telling job, component and rollout the database holds."""
    if not JobRollup.objects.exists():
        raise CommandError("no job has rollups yet: run `make demo` (or ingest events) first")
    # The newest job that restarted (the demo's real TorchRec job): its page has the most
    # to show — two attempts, the restart gap, what was trained again.
    jobs = JobRollup.objects.order_by("-window_start", "job").values_list("job", flat=True)
    job = str(jobs.filter(attempts__gte=2).first() or jobs.first())
    component = (DailyCategoryRollup.objects.exclude(category="productive")
                 .values("category").annotate(s=Sum("gpu_seconds")).order_by("-s").first())
    owner = phase_components().get(component["category"], "unknown") if component else "unknown"
    rollout = Rollout.objects.order_by("at").first()
    shots = [Shot("jobs", "/", "the jobs list"), Shot("fleet", "/fleet/", "the fleet overview"),
             Shot("job", f"/jobs/{quote(job, safe='')}/", "one job's attempts and ranks"),
             Shot("components", "/components/", "lost time per owning component"),
             Shot("component", f"/components/{owner}/", "one component's page"),
             Shot("rollouts", "/rollouts/", "the rollouts list")]
    if rollout is not None:
        shots.append(Shot("rollout", f"/rollouts/{rollout.pk}/", "a rollout's impact"))
    shots += [Shot("changes", "/changes/", "the detected changes"),
              Shot("collectors", "/collectors/", "the collectors' health"),
              Shot("report", "/reports/preview/", "last week's e-mail report")]
    return shots


def _photograph(context: Any, base: str, shot: Shot, target: Path) -> None:
    page = context.new_page()
    problems: list[str] = []
    page.on("console", lambda m: problems.append(f"console: {m.text}")
            if m.type == "error" else None)
    page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
    page.on("response", lambda r: problems.append(f"{r.status} {r.url}")
            if r.status >= 400 else None)
    page.on("request", lambda r: problems.append(f"outside request {r.url}")
            if not r.url.startswith(base) and not r.url.startswith("data:") else None)
    response = page.goto(base + shot.path)
    if response is None or "/accounts/login/" in page.url:
        raise CommandError(f"{shot.path}: not signed in (is --base-url this database's "
                           "server?)")
    page.wait_for_function(CHARTS_DRAWN, timeout=60_000)
    page.wait_for_timeout(300)  # plotly's transitions settle
    if problems:
        raise CommandError(f"{shot.path}: " + "; ".join(problems))
    page.screenshot(path=str(target))
    page.close()
