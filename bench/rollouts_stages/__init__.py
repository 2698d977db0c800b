"""The stages of ``python -m bench.rollouts`` beside its entry point (``bench/rollouts.py``):

- ``floor``: the least time Postgres needs to take the rows an import left, measured in
  the same run, which the import's own time is set against.

Kept in a package beside the entry so that ``make bench``, which runs every ``bench/*.py``,
runs the rollouts bench once and none of its stages on their own.
"""
