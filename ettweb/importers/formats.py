"""Which formats ``ett_import --format`` reads, and the translator of each.

Why a registry: the command, its ``--help``, the benchmark and the tests all list the same
formats from one place, so a new importer is one module and one line here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Final

from ettweb.importers import goodput, nvrx, torchtitan
from ettweb.importers.common import Options, Translation

Translator = Callable[[Iterable[str], Options], Translation]

#: ``--format`` value → translator. ``ett`` (schema-v1 JSONL, no translation) is the
#: command's default and is not listed here.
TRANSLATORS: Final[dict[str, Translator]] = {
    nvrx.FORMAT: nvrx.translate,
    goodput.FORMAT: goodput.translate,
    torchtitan.FORMAT: torchtitan.translate,
}
#: Formats whose logs name no job: without ``--job``, each file is a job named after it (one
#: command may be given many runs' logs); the others' files are translated together.
NAMELESS: Final = frozenset({torchtitan.FORMAT})
#: One line on what each format is, for ``--help`` and the docs.
DESCRIPTIONS: Final[dict[str, str]] = {
    nvrx.FORMAT: "NVIDIA resiliency extension ft_launcher logs (restart-cycle profiling "
                 "events)",
    goodput.FORMAT: "ml-goodput-measurement entries (and Orbax checkpoint entries) as JSON "
                    "lines",
    torchtitan.FORMAT: "TorchTitan training logs (one rank's, or several with [rankN]:)",
}


def translate(fmt: str, lines: Iterable[str], options: Options) -> Translation:
    """Translate ``lines`` of format ``fmt``; KeyError for a format not in TRANSLATORS."""
    return TRANSLATORS[fmt](lines, options)
