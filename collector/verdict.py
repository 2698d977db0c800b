"""Whether the server accepts this collector's credential, heard over HTTP.

Why a channel of its own: the broker is one-way for a training node (its broker user may
only publish), so the worker's verdict on a batch never comes back through it, and an agent
whose credential the server rejects would go on shipping batches the worker quarantines
(keeping a sample of their lines): with a verdict, the agent holds its spool instead
(``collector.agent``). With ``--server-url`` the agent asks ``POST /api/v1/collectors/self``,
signed with its credential as a batch is (``collector.auth.check_body``, one header per
field), at start and after each health report. The server answers 200 when it accepts the
credential, 401 or 403 with its reason when it does not, and 401 with ``"verdict":
"unverified"`` when it could not judge this request (a node clock far off, a replayed check).

A verdict is logged when it changes, not at every check: an ERROR when the credential is
rejected, an INFO when it is accepted (again), a WARNING when the server cannot be heard.
A failed check keeps the last verdict the server gave: a web server down for a minute does
not make a rejected credential look good. The standard library's urllib only, so the agent
stays free of Django and of third-party HTTP clients.
"""

from __future__ import annotations

import http.client
import json
import logging
import threading
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from collector.auth import CHECK_HEADERS, CHECK_PATH, check_body, sign_batch

if TYPE_CHECKING:
    from collector.config import AgentConfig

log = logging.getLogger("ett.collector")

OK = "ok"
REJECTED = "rejected"
#: The server could not judge this request (clock skew, replay): no verdict on the credential.
UNVERIFIED = "unverified"
#: No answer, or not the server's (a connection error, a proxy's page, an older server).
UNREACHABLE = "unreachable"
#: Seconds one check may take: it runs on the agent's thread at start.
CHECK_TIMEOUT_S = 5.0
#: Most characters of an answer quoted in the log.
REASON_CHARS = 300


@dataclass(frozen=True)
class Verdict:
    """One answer: its state and, unless accepted, the reason in the server's words."""

    state: str
    reason: str = ""

    @property
    def is_final(self) -> bool:
        """Whether the server judged the credential (accepted or rejected it)."""
        return self.state in (OK, REJECTED)


def check_credential(server_url: str, collector_id: str, secret: str, source: str,
                     timeout: float = CHECK_TIMEOUT_S) -> Verdict:
    """Ask the server whether it accepts ``collector_id``; never raises."""
    auth = sign_batch(collector_id, secret, [check_body(source)])
    headers = {CHECK_HEADERS[field]: str(value) for field, value in auth.items()}
    url = f"{server_url}{CHECK_PATH}?{urlencode({'source': source})}"
    request = urllib.request.Request(url, data=b"", headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            answer = _json(response.read())
            if answer.get("verdict") == OK:
                return Verdict(OK)
            return Verdict(UNREACHABLE, f"{url} answered {response.status} without a verdict: "
                                        "is --server-url the dashboard's address?")
    except urllib.error.HTTPError as exc:
        answer = _json(exc.read())
        reason = str(answer.get("error") or exc.reason)[:REASON_CHARS]
        if exc.code in (401, 403) and answer.get("verdict") in (REJECTED, UNVERIFIED):
            return Verdict(str(answer["verdict"]), reason)
        return Verdict(UNREACHABLE, f"{url} answered HTTP {exc.code}: {reason}")
    except (OSError, ValueError, http.client.HTTPException) as exc:  # URLError: an OSError
        return Verdict(UNREACHABLE, f"{url}: {type(exc).__name__}: {exc}"[:REASON_CHARS])


def _json(body: bytes) -> dict[str, Any]:
    """The answer's JSON object, or an empty one when it is something else."""
    try:
        parsed = json.loads(body[:65536])
    except (ValueError, RecursionError):
        return {}
    return parsed if isinstance(parsed, dict) else {}


class VerdictWatcher:
    """Holds the server's last verdict; checks once at :meth:`start` and again (on a thread
    of its own, so a slow server never holds up shipping) each time :meth:`request` asks."""

    def __init__(self, check: Callable[[], Verdict], collector_id: str) -> None:
        self._check = check
        self.collector_id = collector_id
        #: The last verdict the server gave (ok or rejected); None before the first.
        self.standing: Verdict | None = None
        self._problem: Verdict | None = None  # the last failed check, until one succeeds
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ett-verdict", daemon=True)

    @property
    def rejected(self) -> bool:
        return self.standing is not None and self.standing.state == REJECTED

    @property
    def reason(self) -> str:
        return self.standing.reason if self.standing is not None else ""

    def start(self) -> VerdictWatcher:
        """Check now, on the caller's thread: the first progress line already knows."""
        self.take(self._check())
        self._thread.start()
        return self

    def request(self) -> None:
        """Check again soon, on the watcher's thread."""
        self._wake.set()

    def close(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(CHECK_TIMEOUT_S + 1)

    def _run(self) -> None:
        while True:
            self._wake.wait()
            if self._stop.is_set():
                return
            self._wake.clear()
            self.take(self._check())

    def take(self, verdict: Verdict) -> None:
        """Keep ``verdict`` and log it if it changes what this agent knows."""
        if not verdict.is_final:
            if verdict != self._problem:
                log.warning("cannot hear whether the server accepts credential %r: %s",
                            self.collector_id, verdict.reason)
            self._problem = verdict
            return
        recovered, self._problem = self._problem is not None, None
        previous, self.standing = self.standing, verdict
        if verdict == previous:
            if recovered:
                log.info("the server answers again: credential %r is still %s",
                         self.collector_id, "rejected" if self.rejected else "accepted")
            return
        if verdict.state == REJECTED:
            log.error("the server rejected this collector's credential %r: %s. The worker "
                      "would quarantine its batches, so none is sent until the server accepts "
                      "the credential (re-enable it in the admin, or 'python manage.py "
                      "ett_collector create NAME' on the server, then ETT_COLLECTOR_ID and "
                      "ETT_COLLECTOR_SECRET_FILE here)", self.collector_id, verdict.reason)
        else:
            log.info("the server accepts credential %r%s", self.collector_id,
                     " again" if previous is not None else "")


def watch_credential(config: AgentConfig) -> VerdictWatcher | None:
    """Start watching the server's verdict on this agent's credential (checking once now),
    or say why this agent cannot: None when unsigned (there is no credential to judge) or
    without ``--server-url`` (nothing to ask)."""
    if config.collector_id is None or config.collector_secret is None:
        return None
    if config.server_url is None:
        log.warning("no --server-url (ETT_SERVER_URL): this agent cannot hear whether the "
                    "server accepts credential %r, and a rejected one would quarantine "
                    "every batch it sends; set it to the dashboard's address (e.g. "
                    "http://web:8000)", config.collector_id)
        return None
    collector_id, secret, url = config.collector_id, config.collector_secret, config.server_url
    source = config.source
    return VerdictWatcher(lambda: check_credential(url, collector_id, secret, source),
                          collector_id).start()
