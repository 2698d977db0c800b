"""Settings of the collector agent: command-line flags, each with an environment fallback.

Why a module of its own: an agent that starts with a bad setting should stop at once with one
line that names the setting, before it touches the spool or the broker. Everything here is
pure parsing (no Celery import), so ``--help`` and bad settings answer instantly.
"""

from __future__ import annotations

import argparse
import math
import os
import socket
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import NoReturn, TypeVar
from urllib.parse import urlsplit

from collector.reporter import DEFAULT_SPOOL_DIR

T = TypeVar("T")

PROG = "ett-collector"
STATE_FILE_NAME = ".collector-state.json"
#: The environment variable of ``--unsigned`` (1: ship without a credential).
UNSIGNED_ENV = "ETT_COLLECTOR_UNSIGNED"
#: Celery's default queue; a worker started with ``celery worker`` and no ``-Q`` consumes it.
DEFAULT_QUEUE = "celery"
DEFAULT_BATCH_LINES = 5000
DEFAULT_BATCH_BYTES = 4 * 1024 * 1024
NETWORK_SCHEMES = frozenset({"redis", "rediss", "amqp", "amqps", "pyamqp"})
SOCKET_SCHEMES = frozenset({"redis+socket"})
AMQP_SCHEMES = frozenset({"amqp", "amqps", "pyamqp"})
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


class ConfigError(ValueError):
    """A setting that cannot be used; ``str(err)`` names the setting and the problem."""


@dataclass(frozen=True)
class AgentConfig:
    """Everything one collector agent needs; see ``python -m collector --help``."""

    broker_url: str
    spool_dir: Path
    state_file: Path
    source: str
    queue: str = DEFAULT_QUEUE
    # Large batches only form under a backlog (a broker outage, a busy fleet): there the
    # per-task cost on the worker dominates, so fewer, larger batches ingest faster
    # (bench.ingest measures it). 4 MiB stays far below broker message limits.
    batch_lines: int = DEFAULT_BATCH_LINES
    batch_bytes: int = DEFAULT_BATCH_BYTES
    batch_wait_s: float = 2.0
    poll_interval_s: float = 0.5
    retry_initial_s: float = 0.5
    retry_max_s: float = 30.0
    publish_timeout_s: float = 10.0
    stats_interval_s: float = 10.0
    once: bool = False
    log_level: str = "INFO"
    collector_id: str | None = None
    collector_secret: str | None = field(default=None, repr=False)  # never in logs
    broker_password: str | None = field(default=None, repr=False)  # never in logs
    metrics_port: int = 0
    metrics_host: str = "127.0.0.1"
    health_interval_s: float = 30.0
    keep_shipped_s: float = 600.0
    server_url: str | None = None

    @property
    def is_amqp(self) -> bool:
        return broker_scheme(self.broker_url) in AMQP_SCHEMES


@dataclass(frozen=True)
class _Setting:
    """One setting: its flag, its environment variable (if any) and its help line."""

    flag: str
    env: str | None
    help: str

    @property
    def label(self) -> str:
        """How errors name the setting: both ways a user can set it."""
        return f"{self.flag} ({self.env})" if self.env else self.flag

    @property
    def dest(self) -> str:
        return self.flag.lstrip("-").replace("-", "_")


SETTINGS: tuple[_Setting, ...] = (
    _Setting("--broker", "CELERY_BROKER_URL",
             "broker URL (required): redis://HOST:PORT/DB, redis+socket:///PATH, amqp://..."),
    _Setting("--broker-password-file", "CELERY_BROKER_PASSWORD_FILE",
             "file holding the broker password (first line), for a --broker URL given "
             "without one"),
    _Setting("--spool-dir", "ETT_SPOOL_DIR",
             f"directory of the *.jsonl spool files to ship (default {DEFAULT_SPOOL_DIR})"),
    _Setting("--state-file", "ETT_COLLECTOR_STATE",
             f"where committed offsets are kept (default SPOOL_DIR/{STATE_FILE_NAME})"),
    _Setting("--source", "ETT_SOURCE", "name of this node in shipped batches (default hostname)"),
    _Setting("--queue", "ETT_INGEST_QUEUE",
             f"broker queue the ingest worker consumes (default {DEFAULT_QUEUE})"),
    _Setting("--batch-lines", "ETT_BATCH_LINES",
             f"most lines in one batch (default {DEFAULT_BATCH_LINES})"),
    _Setting("--batch-bytes", "ETT_BATCH_BYTES",
             "most bytes of lines in one batch; a longer single line ships alone "
             f"(default {DEFAULT_BATCH_BYTES})"),
    _Setting("--batch-wait", "ETT_BATCH_WAIT",
             "seconds a partly filled batch waits for more lines before it ships (default 2)"),
    _Setting("--poll-interval", "ETT_POLL_INTERVAL",
             "seconds between looks at the spool when there is nothing new (default 0.5)"),
    _Setting("--retry-initial", None, "first wait after a broker error, seconds (default 0.5)"),
    _Setting("--retry-max", None, "longest wait between broker retries, seconds (default 30)"),
    _Setting("--publish-timeout", None,
             "seconds to wait for the broker to connect/answer one publish (default 10)"),
    _Setting("--stats-interval", None, "seconds between progress log lines (default 10)"),
    _Setting("--log-level", "ETT_LOG_LEVEL", f"one of {', '.join(LOG_LEVELS)} (default INFO)"),
    _Setting("--collector-id", "ETT_COLLECTOR_ID",
             "this collector's credential id (from 'manage.py ett_collector create NAME'); "
             "batches are signed with HMAC-SHA256 when set"),
    _Setting("--collector-secret", "ETT_COLLECTOR_SECRET",
             "the credential's secret (prefer --collector-secret-file)"),
    _Setting("--collector-secret-file", "ETT_COLLECTOR_SECRET_FILE",
             "file holding the credential's secret (first line)"),
    _Setting("--metrics-port", "ETT_METRICS_PORT",
             "serve Prometheus metrics on this port (default 0: off; 9464 is customary)"),
    _Setting("--metrics-host", "ETT_METRICS_HOST",
             "address the metrics endpoint binds (default 127.0.0.1)"),
    _Setting("--health-interval", "ETT_HEALTH_INTERVAL",
             "seconds between health reports sent as 'ett.collector_health' (default 30)"),
    _Setting("--keep-shipped", "ETT_KEEP_SHIPPED",
             "seconds a sealed, fully shipped segment is kept before deletion (default 600)"),
    _Setting("--server-url", "ETT_SERVER_URL",
             "the ETT web server's address, e.g. http://web:8000: the agent asks it whether "
             "its credential is accepted (at start and after each health report); while it is "
             "rejected the agent logs why and holds its spool (sends and loses nothing). "
             "Without it a rejected credential's batches are sent and quarantined"),
)
_BY_DEST = {setting.dest: setting for setting in SETTINGS}


class _OneLineParser(argparse.ArgumentParser):
    """argparse prints usage plus the error; the agent's contract is a single line, exit 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _OneLineParser(
        prog=PROG,
        description=(
            "Ship ETT events from this node's spool files to the broker. Reads only complete "
            "lines, publishes them in batches as the Celery task 'ett.ingest_batch', and "
            "commits a file's offset only after the broker took the batch, so a crash or a "
            "broker outage delays events but never loses them. Every flag can also be set by "
            "the environment variable shown in brackets."
        ),
        epilog=(
            "Exit status: 0 when done; 1 when --once ended with lines unshipped (stopped by a "
            "signal, or holding them because the server rejects the credential); 2 for a bad "
            "setting. Offsets and totals are kept in the state file, written atomically."
        ),
    )
    for setting in SETTINGS:
        env = f" [env {setting.env}]" if setting.env else ""
        parser.add_argument(setting.flag, dest=setting.dest, metavar="VALUE",
                            help=setting.help + env)
    parser.add_argument("--once", action="store_true",
                        help="ship everything complete now, then exit 0 (default: follow "
                             "until SIGTERM/SIGINT)")
    parser.add_argument("--unsigned", action="store_true",
                        help="ship batches without a credential, for a server started with "
                             f"ETT_INGEST_REQUIRE_AUTH=false (default: a credential is "
                             f"required) [env {UNSIGNED_ENV}=1]")
    return parser


def _raw(args: argparse.Namespace, environ: Mapping[str, str], dest: str) -> str | None:
    """The flag's value, else the environment's; empty environment values count as unset."""
    value: str | None = getattr(args, dest)
    env = _BY_DEST[dest].env
    if value is None and env is not None:
        value = environ.get(env) or None
    return value


def _number(raw: str | None, dest: str, default: T, convert: Callable[[str], T],
            minimum: float, *, strict: bool = False) -> T:
    """Convert a numeric setting, naming the setting when it is not a number or too small."""
    if raw is None:
        return default
    label = _BY_DEST[dest].label
    try:
        value = convert(raw.strip())
    except ValueError:
        kind = "an integer" if convert is int else "a number"
        raise ConfigError(f"{label} must be {kind}, got {raw!r}") from None
    too_small = value <= minimum if strict else value < minimum  # type: ignore[operator]
    if too_small or not math.isfinite(value):  # type: ignore[arg-type]
        bound = f"> {minimum:g}" if strict else f">= {minimum:g}"
        raise ConfigError(f"{label} must be {bound}, got {raw!r}")
    return value


def broker_scheme(url: str) -> str:
    return urlsplit(url).scheme.lower()


def check_broker_url(url: str | None) -> str:
    """Reject what kombu would only reject at the first publish (or mis-handle silently)."""
    label = _BY_DEST["broker"].label
    if url is None or not url.strip():
        raise ConfigError(f"{label} is required (e.g. redis://127.0.0.1:6379/0)")
    url = url.strip()
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError on a non-numeric or out-of-range port
    except ValueError as exc:
        raise ConfigError(f"{label} is not a valid URL: {exc}") from None
    scheme = parts.scheme.lower()
    if scheme in SOCKET_SCHEMES:
        if not parts.path or parts.path == "/":
            raise ConfigError(f"{label} needs a socket path: redis+socket:///path/to/redis.sock")
        return url
    if scheme not in NETWORK_SCHEMES:
        known = ", ".join(sorted(NETWORK_SCHEMES | SOCKET_SCHEMES))
        raise ConfigError(f"{label} has unsupported scheme {scheme or '(none)'!r}; use {known}")
    if not parts.hostname:
        raise ConfigError(f"{label} needs a host: {scheme}://HOST[:PORT]")
    db = parts.path.strip("/")
    if scheme.startswith("redis") and db and not db.isdigit():
        raise ConfigError(f"{label} has database {db!r}; a Redis database is a number")
    return url


def password_conflict(url: str) -> str | None:
    """Why a broker password given beside ``url`` (kombu's ``password``) would go unused, or
    None when it will be used.

    kombu lets a password inside the URL win, and takes a redis+socket URL's password from the
    URL only: either way the password from its file would be silently ignored. The web and
    worker settings (``ettweb.settings.env``) apply the same rule.
    """
    parts = urlsplit(url)
    if parts.password is not None:
        return "has a password already; give the URL without one"
    if parts.scheme.lower() in SOCKET_SCHEMES:
        return ("is a redis+socket URL, whose password kombu reads from the URL only "
                "(redis+socket://:PASSWORD@/path)")
    return None


def _first_line(path: str, label: str) -> str:
    """The first line of a secret file, stripped; an unreadable or empty file names ``label``."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{label} cannot be read: {exc}") from None
    if not lines or not lines[0].strip():
        raise ConfigError(f"{label} cannot be read: empty file {path!r}")
    return lines[0].strip()


def _broker_password(raw: str | None, url: str) -> str | None:
    """The password from ``--broker-password-file``: a secret file, as the broker's own
    (compose's Redis reads the same one), while the URL stays a plain setting."""
    if raw is None:
        return None
    label = _BY_DEST["broker_password_file"].label
    password = _first_line(raw, label)
    conflict = password_conflict(url)
    if conflict is not None:
        raise ConfigError(f"{label} is set but {_BY_DEST['broker'].label} {conflict}")
    return password


def check_server_url(url: str | None) -> str | None:
    """The web server's base URL without a trailing slash; None when not set."""
    if url is None:
        return None
    label = _BY_DEST["server_url"].label
    url = url.strip().rstrip("/")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError on a non-numeric or out-of-range port
    except ValueError as exc:
        raise ConfigError(f"{label} is not a valid URL: {exc}") from None
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"{label} must be http://HOST[:PORT] or https://HOST[:PORT] "
                          f"(the dashboard's address), got {url!r}")
    if parts.query or parts.fragment:
        raise ConfigError(f"{label} must not have a query or fragment, got {url!r}")
    return url


def _text(raw: str | None, dest: str, default: str) -> str:
    if raw is None:
        return default
    if not raw.strip():
        raise ConfigError(f"{_BY_DEST[dest].label} must not be empty")
    return raw.strip()


def _log_level(raw: str | None) -> str:
    level = (raw or "INFO").strip().upper()
    if level not in LOG_LEVELS:
        raise ConfigError(f"{_BY_DEST['log_level'].label} must be one of "
                          f"{', '.join(LOG_LEVELS)}, got {raw!r}")
    return level


def _spool_dir(raw: str | None) -> Path:
    path = Path(raw or DEFAULT_SPOOL_DIR)
    if path.exists() and not path.is_dir():
        raise ConfigError(f"{_BY_DEST['spool_dir'].label} {str(path)!r} is not a directory")
    return path


def config_from_args(argv: Sequence[str] | None = None,
                     environ: Mapping[str, str] | None = None) -> AgentConfig:
    """Parse flags (falling back to ``environ``) into an AgentConfig or raise ConfigError.

    ``--help`` and unknown flags exit through argparse (status 0 and 2).
    """
    environ = os.environ if environ is None else environ
    args = build_parser().parse_args(argv)

    def raw(dest: str) -> str | None:
        return _raw(args, environ, dest)

    broker_url = check_broker_url(raw("broker"))
    broker_password = _broker_password(raw("broker_password_file"), broker_url)
    spool_dir = _spool_dir(raw("spool_dir"))
    state_raw = raw("state_file")
    config = AgentConfig(
        broker_url=broker_url,
        broker_password=broker_password,
        spool_dir=spool_dir,
        state_file=Path(state_raw) if state_raw else spool_dir / STATE_FILE_NAME,
        source=_text(raw("source"), "source", socket.gethostname()),
        queue=_text(raw("queue"), "queue", DEFAULT_QUEUE),
        batch_lines=_number(raw("batch_lines"), "batch_lines", DEFAULT_BATCH_LINES, int, 1),
        batch_bytes=_number(raw("batch_bytes"), "batch_bytes", DEFAULT_BATCH_BYTES, int, 1),
        batch_wait_s=_number(raw("batch_wait"), "batch_wait", 2.0, float, 0),
        poll_interval_s=_number(raw("poll_interval"), "poll_interval", 0.5, float, 0,
                                strict=True),
        retry_initial_s=_number(raw("retry_initial"), "retry_initial", 0.5, float, 0,
                                strict=True),
        retry_max_s=_number(raw("retry_max"), "retry_max", 30.0, float, 0, strict=True),
        publish_timeout_s=_number(raw("publish_timeout"), "publish_timeout", 10.0, float, 0,
                                  strict=True),
        stats_interval_s=_number(raw("stats_interval"), "stats_interval", 10.0, float, 0,
                                 strict=True),
        once=bool(args.once),
        log_level=_log_level(raw("log_level")),
        metrics_port=_port(raw("metrics_port")),
        metrics_host=_text(raw("metrics_host"), "metrics_host", "127.0.0.1"),
        health_interval_s=_number(raw("health_interval"), "health_interval", 30.0, float, 0,
                                  strict=True),
        keep_shipped_s=_number(raw("keep_shipped"), "keep_shipped", 600.0, float, 0),
        server_url=check_server_url(raw("server_url")),
    )
    # The credential last: a bad setting above is named first, whatever the credential.
    collector_id, collector_secret = _credential(raw, _unsigned(args, environ))
    return replace(config, collector_id=collector_id, collector_secret=collector_secret)


def _port(raw: str | None) -> int:
    """The metrics port: 0 (off) or a TCP port."""
    port = _number(raw, "metrics_port", 0, int, 0)
    if port > 65535:
        raise ConfigError(f"{_BY_DEST['metrics_port'].label} must be a port 0-65535 "
                          f"(0: off), got {raw!r}")
    return port


def _unsigned(args: argparse.Namespace, environ: Mapping[str, str]) -> bool:
    """``--unsigned``, or its environment variable set to a true value."""
    value = environ.get(UNSIGNED_ENV, "").strip().lower()
    if value not in ("", "0", "false", "no", "1", "true", "yes"):
        raise ConfigError(f"{UNSIGNED_ENV} must be 1 or 0, got {value!r}")
    return bool(args.unsigned) or value in ("1", "true", "yes")


def _credential(raw: Callable[[str], str | None],
                unsigned: bool = False) -> tuple[str | None, str | None]:
    """The collector's id and secret: both, given one way each; or neither, with
    ``--unsigned``. Without either the agent would ship batches the server quarantines as
    unsigned while saying it shipped them, so it does not start."""
    collector_id, secret, secret_file = (
        raw("collector_id"), raw("collector_secret"), raw("collector_secret_file"))
    label = _BY_DEST["collector_secret"].label
    file_label = _BY_DEST["collector_secret_file"].label
    id_label = _BY_DEST["collector_id"].label
    given = any(v is not None for v in (collector_id, secret, secret_file))
    if unsigned and given:
        raise ConfigError(f"--unsigned and a credential ({id_label}, {label} or {file_label}) "
                          "are both set; use one")
    if unsigned:
        return None, None
    if not given:
        raise ConfigError(
            f"no collector credential: set {id_label} and {file_label} (create one with "
            "'python manage.py ett_collector create NAME' on the server), or pass --unsigned "
            "for a server that accepts unsigned batches (ETT_INGEST_REQUIRE_AUTH=false)")
    if secret is not None and secret_file is not None:
        raise ConfigError(f"{label} and {file_label} are both set; use one")
    if secret_file is not None:
        secret = _first_line(secret_file, file_label)
    if secret is not None and not secret.strip():
        raise ConfigError(f"{label} must not be empty")
    if collector_id is None and secret is not None:
        raise ConfigError(f"{_BY_DEST['collector_id'].label} is required with a secret")
    if collector_id is not None and secret is None:
        raise ConfigError(f"{label} or {file_label} is required with "
                          f"{_BY_DEST['collector_id'].label}")
    return (collector_id.strip() if collector_id else None,
            secret.strip() if secret else None)


def fail(message: str) -> NoReturn:
    """Print the one-line error the agent's contract promises and exit 2."""
    print(f"{PROG}: error: {message}", file=sys.stderr)
    raise SystemExit(2)
