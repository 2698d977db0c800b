"""A real SMTP server on loopback for the weekly report's tests (aiosmtpd).

Why a real server and not Django's locmem outbox: the report is only right if what crosses the
wire is right — the MIME tree, the headers as a mail client parses them, the envelope — and a
relay that answers 451 or 550 must reach the sender as smtplib raises it in production.

:class:`SmtpServer` listens on 127.0.0.1 on a port the kernel picks (the socket is bound before
the server starts, so two test sessions never race for a port) and records every accepted
message. Its handler can be told to refuse the next N transactions with a given reply, at RCPT
(a bad mailbox) or at DATA (a relay in trouble). Use it as a context manager; ``use_in(settings)``
points Django's SMTP backend at it in-process, ``env()`` does the same for a subprocess.
"""

from __future__ import annotations

import email
import email.policy
import logging
import socket
import threading
from collections import Counter, deque
from collections.abc import Awaitable
from dataclasses import dataclass
from email.message import EmailMessage
from types import TracebackType
from typing import Any, Literal

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import SMTP, Envelope, Session

Stage = Literal["rcpt", "data"]
TRY_AGAIN: str = "451 4.3.0 try again later"
NO_SUCH_USER: str = "550 5.1.1 no such user"
HOST = "127.0.0.1"
# aiosmtpd logs every SMTP command at INFO; a failing test's output should show the test's.
logging.getLogger("mail.log").setLevel(logging.WARNING)


@dataclass(frozen=True)
class Received:
    """One accepted transaction: the envelope and the raw message bytes."""

    mail_from: str
    rcpt_tos: tuple[str, ...]
    data: bytes

    def message(self) -> EmailMessage:
        """The message as a mail client parses it (modern policy: decoded headers, parts)."""
        parsed = email.message_from_bytes(self.data, policy=email.policy.default)
        assert isinstance(parsed, EmailMessage)
        return parsed


@dataclass(frozen=True)
class Refused:
    """One transaction the handler refused on purpose, and with what reply."""

    stage: Stage
    rcpt_tos: tuple[str, ...]
    reply: str


class RecordingHandler:
    """Accepts and records messages, or refuses the next ones with a scripted reply.

    Called on the server's event-loop thread while tests read from theirs: every shared
    field is behind one lock.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._received: list[Received] = []
        self._refused: list[Refused] = []
        self._script: deque[tuple[Stage, str]] = deque()

    def fail_next(self, count: int, reply: str = TRY_AGAIN, *, stage: Stage = "data") -> None:
        """Refuse the next ``count`` transactions with ``reply`` ("451 ..."), then accept."""
        with self._lock:
            self._script.extend([(stage, reply)] * count)

    def _refusal(self, stage: Stage, rcpt_tos: list[str]) -> str | None:
        with self._lock:
            if self._script and self._script[0][0] == stage:
                _, reply = self._script.popleft()
                self._refused.append(Refused(stage, tuple(rcpt_tos), reply))
                return reply
        return None

    async def handle_RCPT(self, server: SMTP, session: Session, envelope: Envelope,
                          address: str, rcpt_options: list[str]) -> str:
        refusal = self._refusal("rcpt", [address])
        if refusal is not None:
            return refusal
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        refusal = self._refusal("data", list(envelope.rcpt_tos))
        if refusal is not None:
            return refusal
        content = envelope.original_content or envelope.content or b""
        data = content if isinstance(content, bytes) else content.encode()
        with self._lock:
            self._received.append(Received(str(envelope.mail_from), tuple(envelope.rcpt_tos),
                                           data))
        return "250 2.0.0 OK: queued"

    @property
    def received(self) -> list[Received]:
        with self._lock:
            return list(self._received)

    @property
    def refused(self) -> list[Refused]:
        with self._lock:
            return list(self._refused)

    def to(self, address: str) -> list[Received]:
        """Every accepted message whose envelope names ``address``."""
        return [r for r in self.received if address in r.rcpt_tos]

    def count_by_recipient(self) -> Counter[str]:
        return Counter(address for r in self.received for address in r.rcpt_tos)


class _BoundController(Controller):
    """aiosmtpd's threaded controller, serving on a socket bound before it starts."""

    def __init__(self, handler: RecordingHandler, sock: socket.socket) -> None:
        self._sock = sock
        super().__init__(handler, hostname=HOST, port=sock.getsockname()[1],
                         ready_timeout=10.0)

    def _create_server(self) -> Awaitable[Any]:
        return self.loop.create_server(self._factory_invoker, sock=self._sock)


class SmtpServer:
    """A recording SMTP server on 127.0.0.1 (``with SmtpServer() as smtp: ...``)."""

    def __init__(self) -> None:
        self.handler = RecordingHandler()
        self.host = HOST
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((HOST, 0))
        sock.listen(64)
        self.port: int = sock.getsockname()[1]
        self._controller = _BoundController(self.handler, sock)

    def __enter__(self) -> SmtpServer:
        self._controller.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self._controller.stop()

    def use_in(self, settings: Any) -> None:
        """Point Django at this server (pytest-django's ``settings`` fixture forces locmem)."""
        settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
        settings.EMAIL_HOST = self.host
        settings.EMAIL_PORT = self.port
        settings.EMAIL_HOST_USER = ""
        settings.EMAIL_HOST_PASSWORD = ""
        settings.EMAIL_USE_TLS = False
        settings.EMAIL_USE_SSL = False
        settings.EMAIL_TIMEOUT = 10.0

    def env(self) -> dict[str, str]:
        """The environment a ``manage.py`` subprocess needs to send here (base settings read
        EMAIL_* from it; outside pytest Django's default backend is SMTP)."""
        return {"EMAIL_HOST": self.host, "EMAIL_PORT": str(self.port), "EMAIL_USE_TLS": "false",
                "EMAIL_USE_SSL": "false", "EMAIL_TIMEOUT": "10"}

    # shorthands for the handler
    @property
    def received(self) -> list[Received]:
        return self.handler.received

    def fail_next(self, count: int, reply: str = TRY_AGAIN, *, stage: Stage = "data") -> None:
        self.handler.fail_next(count, reply, stage=stage)


def closed_port() -> int:
    """A loopback port nothing listens on (bound then closed): connecting is refused."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        port: int = sock.getsockname()[1]
    return port
