"""``python -m collector`` / ``ett-collector``: run the per-node collector agent.

Exit status: 0 when done (``--once`` drained the spool, or a follow run was stopped by
SIGTERM/SIGINT), 1 when ``--once`` ended with lines unshipped (stopped by a signal while it
had lines in hand, or holding them because the server rejects the credential), 2 for a bad
setting (one line on stderr naming it).
"""

from __future__ import annotations

import logging
import signal
import sys
from collections.abc import Sequence
from types import FrameType

from collector.agent import Agent
from collector.config import AgentConfig, ConfigError, config_from_args, fail


def _prepare_spool(config: AgentConfig) -> None:
    """Create the spool directory up front: the agent may start before any trainer does."""
    try:
        config.spool_dir.mkdir(parents=True, exist_ok=True)
        config.state_file.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"--spool-dir (ETT_SPOOL_DIR) cannot be created: {exc}") from None


def _stop_on_signals(agent: Agent) -> None:
    def handler(signum: int, _frame: FrameType | None) -> None:
        logging.getLogger("ett.collector").info(
            "%s received: shipping the batch in hand, then exiting",
            signal.Signals(signum).name)
        agent.stop()

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)


def main(argv: Sequence[str] | None = None) -> int:
    try:
        config = config_from_args(argv)
        _prepare_spool(config)
    except ConfigError as exc:
        fail(str(exc))
    logging.basicConfig(level=config.log_level, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    agent = Agent(config)
    _stop_on_signals(agent)
    return agent.run()


if __name__ == "__main__":
    sys.exit(main())
