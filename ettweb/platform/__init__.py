"""What every ETT process stands on, whichever app it serves: the embedded Postgres and Redis
(``embedded``) and the demo that runs on them (``demo``), the broker fixes, the heartbeat that
keeps a live worker's messages its own and the retry rules (``brokerfix``, ``visibility``,
``retry``), the beat schedule (``schedule``), the web middleware, text and colour rules every
layer applies (``middleware``, ``text``, ``colours``), the read-only admin base
(``admin_readonly``) and the worker requests a read sends instead of writing (``deferred``).

No feature app lives here, and nothing here imports one.
"""
