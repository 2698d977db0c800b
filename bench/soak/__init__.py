"""The soak: ``python -m bench.soak`` (issue 13) — see bench/soak/run.py for what it does.

Modules: ``run`` (the orchestrator and its command line), ``rig`` (nodes, workers, profiles),
``services`` (private Postgres, Redis, RabbitMQ, the TCP proxy, process groups), ``chaos``
(the seeded schedule and every fault), ``trainer`` (one simulated trainer process on a real
Reporter) and ``accounting`` (per-id books and the rollup recompute).
"""
