"""The statistics behind rollout verdicts and change detection: a rollout impact's estimators
(``estimators``) and level shifts in a daily series (``level_shifts``).

Pure numpy, no Django (an import contract checks): the pages and the beat task run them over
stored rollups, and the calibration benchmark over simulated fleets with known truth, without a
database, so both measure the same code.
"""
