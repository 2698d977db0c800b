"""Rollups: per-job, per-attempt and per-UTC-day numbers kept fresh as batches arrive.

The dashboard and reports read these tables instead of re-attributing every event on every
request; ``logic.refresh_jobs`` keeps them equal to what the engine says about the stored events.
"""
