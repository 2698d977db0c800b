"""Adapters that instrument trainers built on a framework (Lightning, transformers, plain torch).

Why apart from the core: each adapter imports its framework and is installed as an optional
extra, while the core (Reporter, spool, agent, schema) must run anywhere with no dependency.
Adapters import the core; the core never imports an adapter (an import contract checks both).
"""
