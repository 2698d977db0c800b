"""``python -m trainer``: the supervisor (see :mod:`trainer.launch`)."""

import sys

from trainer.launch import main

sys.exit(main())
