"""The stages of ``python -m bench.dashboard`` (the entry point is ``bench/dashboard.py``).

One module per stage, in the order a run goes through them:

- ``fleet``: the simulated fleet with every rank's events, loaded through the ingest path;
- ``database``: the bench's own database, kept between runs and reused for the same plan;
- ``catalog``: what the database holds, as values to fill parameters with;
- ``discovery``: every page (the URL resolver) and endpoint (the OpenAPI document) to time;
- ``forms``: a page's own GET filters and same-page links, read from its HTML;
- ``timing``: filling each target's requests and timing them in-process;
- ``raw_path``: the same numbers computed from raw events, for the ratio;
- ``impacts``: beat's warm pass before timing, and the price of a window nobody warmed.

Kept in a package beside the entry so that ``make bench``, which runs every ``bench/*.py``,
runs the dashboard bench once and none of its stages on their own.
"""

import sys


def say(text: str) -> None:
    """A progress line on stderr (stdout's last line is the result's JSON)."""
    print(f"[bench.dashboard] {text}", file=sys.stderr, flush=True)
