"""Make the repository root importable when pytest-django is disabled (``-p no:django``).

pytest-django normally puts the directory of ``manage.py`` on ``sys.path``; these tests need
no Django, so they must also run without it. Harmless when the root is already there (an
up-to-date editable install or ``pythonpath = ["."]`` in the pytest settings).
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
