"""The agent's settings: a bad one stops it at once with exit 2 and one line naming it."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from collector.__main__ import main
from collector.config import STATE_FILE_NAME, ConfigError, config_from_args
from collector.publisher import publish_route, transport_options

REPO = Path(__file__).resolve().parents[2]
ENV_SETTINGS = ("CELERY_BROKER_URL", "CELERY_BROKER_PASSWORD_FILE", "ETT_SPOOL_DIR",
                "ETT_COLLECTOR_STATE", "ETT_SOURCE", "ETT_INGEST_QUEUE", "ETT_BATCH_LINES",
                "ETT_BATCH_BYTES", "ETT_BATCH_WAIT", "ETT_POLL_INTERVAL", "ETT_LOG_LEVEL",
                "ETT_COLLECTOR_ID", "ETT_COLLECTOR_SECRET", "ETT_COLLECTOR_SECRET_FILE",
                "ETT_METRICS_PORT", "ETT_METRICS_HOST", "ETT_HEALTH_INTERVAL", "ETT_KEEP_SHIPPED",
                "ETT_SERVER_URL")


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """CI exports CELERY_BROKER_URL; these tests decide every setting themselves."""
    for name in ENV_SETTINGS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)


GOOD = ["--broker", "redis://127.0.0.1:6379/0"]
#: GOOD for a server that takes unsigned batches: a whole setting, no credential needed.
UNSIGNED = [*GOOD, "--unsigned"]


@pytest.mark.parametrize(
    ("argv", "env", "names"),
    [
        ([], {}, "--broker (CELERY_BROKER_URL) is required"),
        ([], {"CELERY_BROKER_URL": "  "}, "--broker (CELERY_BROKER_URL) is required"),
        (["--broker", "http://example.com"], {}, "unsupported scheme 'http'"),
        (["--broker", "localhost:6379"], {}, "--broker (CELERY_BROKER_URL)"),
        (["--broker", "redis://host:port/0"], {}, "--broker (CELERY_BROKER_URL) is not a valid"),
        (["--broker", "redis:///0"], {}, "--broker (CELERY_BROKER_URL) needs a host"),
        (["--broker", "redis://h/cache"], {}, "a Redis database is a number"),
        (["--broker", "redis+socket://"], {}, "needs a socket path"),
        ([], {"CELERY_BROKER_URL": "amqp://"}, "--broker (CELERY_BROKER_URL) needs a host"),
        ([*GOOD, "--broker-password-file", "missing"], {},
         "--broker-password-file (CELERY_BROKER_PASSWORD_FILE) cannot be read"),
        (GOOD, {"CELERY_BROKER_PASSWORD_FILE": "afile"},
         "--broker-password-file (CELERY_BROKER_PASSWORD_FILE) cannot be read: empty file"),
        ([*GOOD, "--batch-lines", "0"], {}, "--batch-lines (ETT_BATCH_LINES) must be >= 1"),
        (GOOD, {"ETT_BATCH_LINES": "many"}, "--batch-lines (ETT_BATCH_LINES) must be an integer"),
        ([*GOOD, "--batch-bytes", "1.5"], {}, "--batch-bytes (ETT_BATCH_BYTES) must be an integer"),
        ([*GOOD, "--batch-wait", "-1"], {}, "--batch-wait (ETT_BATCH_WAIT) must be >= 0"),
        ([*GOOD, "--batch-wait", "nan"], {}, "--batch-wait (ETT_BATCH_WAIT) must be >= 0"),
        ([*GOOD, "--poll-interval", "0"], {}, "--poll-interval (ETT_POLL_INTERVAL) must be > 0"),
        ([*GOOD, "--retry-max", "inf"], {}, "--retry-max must be > 0"),
        ([*GOOD, "--source", " "], {}, "--source (ETT_SOURCE) must not be empty"),
        ([*GOOD, "--log-level", "LOUD"], {}, "--log-level (ETT_LOG_LEVEL) must be one of"),
        ([*GOOD, "--spool-dir", "afile"], {}, "--spool-dir (ETT_SPOOL_DIR) 'afile' is not a"),
        ([*GOOD, "--bogus"], {}, "unrecognized arguments: --bogus"),
        (["--broker"], {}, "argument --broker: expected one argument"),
        ([*GOOD, "--collector-id", "c1"], {},
         "--collector-secret (ETT_COLLECTOR_SECRET) or --collector-secret-file "
         "(ETT_COLLECTOR_SECRET_FILE) is required with --collector-id (ETT_COLLECTOR_ID)"),
        (GOOD, {"ETT_COLLECTOR_SECRET": "s"},
         "--collector-id (ETT_COLLECTOR_ID) is required with a secret"),
        ([*GOOD, "--collector-id", "c1", "--collector-secret", "s",
          "--collector-secret-file", "afile"], {}, "are both set; use one"),
        ([*GOOD, "--collector-id", "c1", "--collector-secret-file", "missing"], {},
         "--collector-secret-file (ETT_COLLECTOR_SECRET_FILE) cannot be read"),
        ([*GOOD, "--collector-id", "c1", "--collector-secret-file", "afile"], {},
         "--collector-secret-file (ETT_COLLECTOR_SECRET_FILE) cannot be read: empty file"),
        ([*GOOD, "--metrics-port", "70000"], {},
         "--metrics-port (ETT_METRICS_PORT) must be a port 0-65535"),
        ([*GOOD, "--metrics-port", "http"], {},
         "--metrics-port (ETT_METRICS_PORT) must be an integer"),
        (GOOD, {"ETT_HEALTH_INTERVAL": "0"}, "--health-interval (ETT_HEALTH_INTERVAL) must be > 0"),
        ([*GOOD, "--keep-shipped", "-5"], {}, "--keep-shipped (ETT_KEEP_SHIPPED) must be >= 0"),
        (UNSIGNED, {"ETT_SERVER_URL": "web:8000"},
         "--server-url (ETT_SERVER_URL) must be http://HOST[:PORT] or https://HOST[:PORT]"),
        ([*UNSIGNED, "--server-url", "ftp://web"], {}, "--server-url (ETT_SERVER_URL) must be"),
        ([*UNSIGNED, "--server-url", "http://"], {}, "--server-url (ETT_SERVER_URL) must be"),
        ([*UNSIGNED, "--server-url", "http://web:port"], {},
         "--server-url (ETT_SERVER_URL) is not a valid URL"),
        ([*UNSIGNED, "--server-url", "http://web/?x=1"], {},
         "--server-url (ETT_SERVER_URL) must not have a query"),
        (GOOD, {}, "no collector credential: set --collector-id (ETT_COLLECTOR_ID) and "
                   "--collector-secret-file (ETT_COLLECTOR_SECRET_FILE) (create one with "
                   "'python manage.py ett_collector create NAME' on the server), or pass "
                   "--unsigned"),
        ([*UNSIGNED, "--collector-id", "c1", "--collector-secret", "s"], {},
         "--unsigned and a credential"),
        (GOOD, {"ETT_COLLECTOR_UNSIGNED": "maybe"}, "ETT_COLLECTOR_UNSIGNED must be 1 or 0"),
        ([*UNSIGNED, "--batch-lines", "0"], {}, "--batch-lines (ETT_BATCH_LINES) must be >= 1"),
    ],
)
def test_bad_setting_exits_2_with_one_line_naming_it(
        argv: list[str], env: dict[str, str], names: str, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    Path("afile").write_text("")
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("ett-collector: error: "), err
    assert names in err
    assert not Path("var").exists()  # it stopped before creating the spool


def test_the_module_exits_2_without_a_broker(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ENV_SETTINGS}
    result = subprocess.run([sys.executable, "-m", "collector", "--once"], cwd=REPO, env=env,
                            capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        "ett-collector: error: --broker (CELERY_BROKER_URL) is required "
        "(e.g. redis://127.0.0.1:6379/0)"]


def test_help_describes_the_agent(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    for words in ("ett.ingest_batch", "CELERY_BROKER_URL", "--once", "--batch-bytes",
                  "ETT_SPOOL_DIR", "SIGTERM"):
        assert words in out


def test_defaults_and_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = config_from_args(UNSIGNED)
    assert cfg.spool_dir == Path("var/spool")
    assert cfg.state_file == Path("var/spool") / STATE_FILE_NAME
    assert cfg.source == socket.gethostname()
    assert (cfg.queue, cfg.batch_lines, cfg.batch_bytes, cfg.once) == (
        "celery", 5000, 4 * 1024 * 1024, False)

    monkeypatch.setenv("CELERY_BROKER_URL", "redis+socket:///run/redis.sock")
    monkeypatch.setenv("ETT_SPOOL_DIR", "/data/spool")
    monkeypatch.setenv("ETT_BATCH_LINES", "50")
    monkeypatch.setenv("ETT_SOURCE", "node-9")
    cfg = config_from_args(["--batch-lines", "70", "--once", "--batch-wait", "0", "--unsigned"])
    assert cfg.broker_url == "redis+socket:///run/redis.sock"
    assert cfg.state_file == Path("/data/spool") / STATE_FILE_NAME
    assert (cfg.batch_lines, cfg.source, cfg.once, cfg.batch_wait_s) == (70, "node-9", True, 0)


@pytest.mark.parametrize(
    ("url", "confirms"),
    [("amqp://guest:guest@127.0.0.1:5672//", True), ("pyamqp://h//", True),
     ("redis://127.0.0.1:6379/0", False), ("redis+socket:///tmp/r.sock", False)],
)
def test_publisher_confirms_on_amqp_only(url: str, confirms: bool) -> None:
    options = transport_options(config_from_args(["--broker", url, "--unsigned"]))
    assert options.get("confirm_publish", False) is confirms
    assert options["max_retries"] == 0  # the agent's own loop retries, with backoff


@pytest.mark.parametrize(
    ("url", "route"),
    [("amqp://ett-node@rabbit:5672/ett", {"exchange": "ingest", "routing_key": "ingest",
                                          "declare": [], "mandatory": True}),
     ("redis://127.0.0.1:6379/0", {})],
)
def test_on_amqp_a_batch_goes_to_its_queues_exchange_declaring_nothing(
        url: str, route: dict[str, object]) -> None:
    """A node's publish-only RabbitMQ user may write that exchange and configure nothing
    (tests/ettweb/test_security_broker.py runs it against a real RabbitMQ)."""
    config = config_from_args(["--broker", url, "--queue", "ingest", "--unsigned"])
    assert publish_route(config) == route


def test_the_broker_password_comes_from_its_file_and_stays_out_of_logs() -> None:
    Path("broker.password").write_text(" pa:ss/word \nignored\n")
    cfg = config_from_args([*UNSIGNED, "--broker-password-file", "broker.password"])
    assert (cfg.broker_url, cfg.broker_password) == ("redis://127.0.0.1:6379/0", "pa:ss/word")
    assert "pa:ss/word" not in repr(cfg)
    assert config_from_args(UNSIGNED).broker_password is None


@pytest.mark.parametrize(
    ("url", "problem"),
    [("redis://:inline@127.0.0.1:6379/0", "has a password already"),
     ("amqp://ett-node:inline@rabbit:5672/ett", "has a password already"),
     ("redis+socket:///run/redis.sock", "redis+socket://:PASSWORD@/path")],
)
def test_a_password_file_kombu_would_ignore_is_refused(url: str, problem: str) -> None:
    """kombu lets a password in the URL win and reads a socket's from the URL only: a
    password file the agent silently ignored would hide the misconfiguration."""
    Path("broker.password").write_text("s3cret\n")
    with pytest.raises(ConfigError) as refused:
        config_from_args(["--broker", url, "--broker-password-file", "broker.password",
                          "--unsigned"])
    assert str(refused.value).startswith(
        "--broker-password-file (CELERY_BROKER_PASSWORD_FILE) is set but --broker "
        "(CELERY_BROKER_URL) ")
    assert problem in str(refused.value)


def test_credential_and_health_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = config_from_args(UNSIGNED)
    assert (cfg.collector_id, cfg.collector_secret, cfg.metrics_port) == (None, None, 0)
    assert (cfg.metrics_host, cfg.health_interval_s, cfg.keep_shipped_s) == (
        "127.0.0.1", 30.0, 600.0)
    Path("secret").write_text("  s3cret  \nignored\n")
    monkeypatch.setenv("ETT_COLLECTOR_ID", "c-7")
    monkeypatch.setenv("ETT_METRICS_PORT", "9464")
    cfg = config_from_args([*GOOD, "--collector-secret-file", "secret"])
    assert (cfg.collector_id, cfg.collector_secret, cfg.metrics_port) == ("c-7", "s3cret", 9464)
    assert "s3cret" not in repr(cfg)  # the secret never reaches a log line


def test_the_server_url_is_optional_and_kept_without_a_trailing_slash(
        monkeypatch: pytest.MonkeyPatch) -> None:
    assert config_from_args(UNSIGNED).server_url is None
    monkeypatch.setenv("ETT_SERVER_URL", "http://web:8000/")
    assert config_from_args(UNSIGNED).server_url == "http://web:8000"
    flag = config_from_args([*UNSIGNED, "--server-url", "https://ett.example.com/ett"])
    assert flag.server_url == "https://ett.example.com/ett"  # the flag wins; a path is kept


def test_unsigned_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """A container sets ``ETT_COLLECTOR_UNSIGNED=1`` where a host would pass ``--unsigned``."""
    monkeypatch.setenv("ETT_COLLECTOR_UNSIGNED", "1")
    cfg = config_from_args(GOOD)
    assert (cfg.collector_id, cfg.collector_secret) == (None, None)
    monkeypatch.setenv("ETT_COLLECTOR_UNSIGNED", "0")
    with pytest.raises(ConfigError, match="no collector credential"):
        config_from_args(GOOD)
