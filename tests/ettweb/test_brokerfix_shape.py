"""``ettweb.platform.brokerfix`` patches private kombu internals, so kombu is pinned to the release
series it was tested with, and a change of shape is caught by name before a worker runs on it
(issue 27, item 8)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

import kombu
import pytest
from kombu.transport import redis as kombu_redis
from kombu.transport import virtual

from ettweb.platform import brokerfix

REPO = Path(__file__).resolve().parents[2]


def test_the_installed_kombu_has_the_shape_the_guards_expect(guards: None) -> None:
    assert brokerfix.shape_problems() == []
    assert kombu.__version__.startswith(f"{brokerfix.TESTED_KOMBU}.")


def test_pyproject_pins_kombu_and_celery_to_the_tested_series() -> None:
    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    major, minor = brokerfix.TESTED_KOMBU.split(".")
    for name in ("kombu", "celery"):
        (spec,) = [d for d in deps if re.match(rf"{name}\b", d)]
        assert spec == f"{name}>={major}.{minor},<{major}.{int(minor) + 1}", spec


def _change(monkeypatch: pytest.MonkeyPatch, cls: Any, name: str, new: Any | None) -> None:
    """kombu's ``cls.name`` as if it shipped as ``new`` (None: gone), whether or not the
    guards are installed yet (once they are, the check reads the originals they kept)."""
    key = (cls.__name__, name)
    if new is None:
        monkeypatch.delattr(cls, name)
        if key in brokerfix._ORIGINALS:
            monkeypatch.delitem(brokerfix._ORIGINALS, key)
        return
    monkeypatch.setattr(cls, name, new)
    if key in brokerfix._ORIGINALS:
        monkeypatch.setitem(brokerfix._ORIGINALS, key, new)


@pytest.fixture(params=["installed", "not installed"])
def guards(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Run a check both before and after ``install()`` (the test suite may have installed
    the guards by importing the Celery app)."""
    if request.param == "installed":
        brokerfix.install()
    elif brokerfix._ORIGINALS:
        for (cls_name, method), original in brokerfix._ORIGINALS.items():
            monkeypatch.setattr(getattr(kombu_redis, cls_name), method, original)
        monkeypatch.setattr(brokerfix, "_ORIGINALS", {})


def test_a_changed_signature_is_named(monkeypatch: pytest.MonkeyPatch, guards: None) -> None:

    def _brpop_start(self: Any, timeout: float | None = None, *, block: bool = True) -> None:
        self._in_poll = self.client.connection  # the facts hold; the parameters do not
        self._queue_cycle.consume(len(self.active_queues))
        self.client.connection.send_command("BRPOP")

    _change(monkeypatch, kombu_redis.Channel, "_brpop_start", _brpop_start)
    assert brokerfix.shape_problems() == [
        "kombu.transport.redis.Channel._brpop_start takes ('self', 'timeout', 'block'), "
        "not ('self', 'timeout')"]


def test_a_changed_unacked_layout_and_a_missing_method_are_named(
        monkeypatch: pytest.MonkeyPatch, guards: None) -> None:

    def append(self: Any, message: Any, delivery_tag: str) -> None:
        """Records the message elsewhere."""

    _change(monkeypatch, kombu_redis.QoS, "append", append)
    _change(monkeypatch, kombu_redis.Channel, "_q_for_pri", None)
    monkeypatch.delattr(kombu_redis.Channel, "unacked_index_key")
    problems = brokerfix.shape_problems()
    assert "kombu.transport.redis.QoS.append no longer does 'self.unacked_index_key'" in problems
    assert "kombu.transport.redis.Channel._q_for_pri is gone" in problems
    assert "kombu.transport.redis.Channel.unacked_index_key is gone" in problems


def test_a_restore_scan_the_heartbeat_no_longer_matches_is_named(
        monkeypatch: pytest.MonkeyPatch, guards: None) -> None:
    """The heartbeat (``ettweb.platform.visibility``) re-scores the index with the time and
    reads the held tags off the QoS: a scan that ages messages otherwise, or a QoS that keeps
    its tags elsewhere, would let a live worker's messages go to another worker."""

    def restore_visible(self: Any, start: int = 0, num: int = 10, interval: int = 10) -> None:
        """Restores by a per-message deadline instead of the delivery time."""

    _change(monkeypatch, kombu_redis.QoS, "restore_visible", restore_visible)
    monkeypatch.delattr(virtual.QoS, "_dirty")
    problems = brokerfix.shape_problems()
    assert problems == [
        "kombu.transport.redis.QoS.restore_visible no longer does "
        "'ceil = time() - self.visibility_timeout'",
        "kombu.transport.redis.QoS.restore_visible no longer does "
        "'self.unacked_index_key, ceil, 0'",
        "kombu.transport.redis.QoS._dirty is gone"]


def test_another_kombu_release_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kombu, "__version__", "5.8.0")
    assert brokerfix.shape_problems() == [
        f"kombu 5.8.0 is installed; the guards were tested with {brokerfix.TESTED_KOMBU}.x "
        "(pyproject.toml pins it)"]


def test_install_refuses_a_kombu_of_another_shape(monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker does not start on guards patched blind: the error says what changed."""

    def restore_unacked(self: Any, client: Any = None) -> None:
        """kombu's, as if the guards were not installed yet."""

    monkeypatch.setattr(kombu_redis.QoS, "restore_unacked", restore_unacked)
    monkeypatch.setattr(kombu, "__version__", "6.0.0")
    with pytest.raises(RuntimeError, match=r"cannot guard this kombu: kombu 6\.0\.0 is "):
        brokerfix.install()
    assert kombu_redis.QoS.restore_unacked is restore_unacked  # nothing was patched
