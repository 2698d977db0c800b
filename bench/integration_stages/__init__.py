"""The stages of ``python -m bench.integrations``: what bringing your own trainer costs.

One module per stage, so ``make bench``, which runs every ``bench/*.py``, runs the
integrations bench once and none of its stages on their own:

- ``importers``: each history importer's translation rate (events/s) on a synthetic file made
  in memory (pure translation, no database);
- ``torch_hooks``: a plain-PyTorch loop inside ``reporter.train`` beside the bare loop;
- ``frameworks``: the Lightning and transformers callbacks' per-step hooks beside a bare loop.
"""
