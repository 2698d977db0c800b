"""Settings per environment: ``local`` (default), ``test``, ``production``; ``base`` is shared."""
