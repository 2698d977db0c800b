"""What every ETT process stands on, whichever app it serves: the embedded Postgres and Redis
(``embedded``) and the demo that runs on them (``demo``), the broker fixes and retry rules
(``brokerfix``, ``retry``), the beat schedule (``schedule``), the web middleware, text and
colour rules every layer applies (``middleware``, ``text``, ``colours``), the read-only admin
base (``admin_readonly``) and the worker requests a read sends instead of writing
(``deferred``).

No feature app lives here, and nothing here imports one.
"""
