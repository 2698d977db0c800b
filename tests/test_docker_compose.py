"""docker-compose.yml is production: no Docker engine here, so parse it and check every command
names a real module, entry point or management command of this repository."""

from __future__ import annotations

import importlib
import importlib.util
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
SERVICES: dict[str, Any] = COMPOSE["services"]
OUR_IMAGE = "ett:latest"


def _module_exists(dotted: str) -> bool:
    return importlib.util.find_spec(dotted) is not None


def _check_command(argv: list[str]) -> None:
    program = argv[0]
    if program == "python" and argv[1] == "-m":
        assert _module_exists(argv[2]), f"no module {argv[2]}"
        assert (ROOT / argv[2].replace(".", "/") / "__main__.py").exists()
    elif program == "python" and argv[1] == "manage.py":
        from django.core.management import get_commands

        assert argv[2] in get_commands(), f"no management command {argv[2]}"
    elif program == "gunicorn":
        module, _, attr = argv[1].partition(":")
        assert hasattr(importlib.import_module(module), attr), argv[1]
    elif program == "celery":
        app_module = argv[argv.index("-A") + 1]
        assert _module_exists(app_module), f"no celery app module {app_module}"
        assert argv[argv.index("-A") + 2] in {"worker", "beat"}
    else:
        pytest.fail(f"unexpected program {program!r}")



def test_expected_services_exist() -> None:
    assert {"postgres", "redis", "web", "worker", "beat", "collector"} <= SERVICES.keys()


OUR_SERVICES = sorted(n for n, s in SERVICES.items() if s.get("image") == OUR_IMAGE)


@pytest.mark.parametrize("name", OUR_SERVICES)
def test_our_commands_name_real_entry_points(name: str) -> None:
    _check_command(SERVICES[name]["command"])


def test_one_image_is_built_from_the_dockerfile() -> None:
    built = [n for n, s in SERVICES.items() if "build" in s]
    assert len(built) == 1 and SERVICES[built[0]]["image"] == OUR_IMAGE
    for line in (ROOT / "Dockerfile").read_text().splitlines():
        if line.startswith("COPY "):
            for source in line.split()[1:-1]:
                assert (ROOT / source).exists(), f"Dockerfile copies missing {source}"


def test_dockerfile_default_command_is_real() -> None:
    cmd = re.search(r'^CMD \[(.*)\]$', (ROOT / "Dockerfile").read_text(), re.M)
    assert cmd is not None
    _check_command([part.strip().strip('"') for part in cmd.group(1).split(",")])


def test_production_services_require_secrets() -> None:
    env = SERVICES["web"]["environment"]
    assert env["DJANGO_SETTINGS_MODULE"] == "ettweb.settings.production"
    assert ":?" in env["DJANGO_SECRET_KEY"], "the secret key must have no default"
    for name in ("web", "worker", "beat"):
        assert SERVICES[name]["environment"]["CELERY_BROKER_URL"].startswith("redis://redis")


def test_every_service_of_ours_can_send_reports_with_links_that_work() -> None:
    """The beat plans reports and the worker sends them: both need the relay and base URL
    (the same anchor for every service, so none can disagree)."""
    for name in ("web", "worker", "beat"):
        env = SERVICES[name]["environment"]
        for variable in ("EMAIL_HOST", "EMAIL_PORT", "EMAIL_HOST_USER", "EMAIL_HOST_PASSWORD",
                         "EMAIL_USE_TLS", "DEFAULT_FROM_EMAIL", "ETT_BASE_URL"):
            assert variable in env, f"{name} lacks {variable}"
        assert env["ETT_BASE_URL"].startswith("${ETT_BASE_URL:-http")
