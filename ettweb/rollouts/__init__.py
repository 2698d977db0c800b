"""Rollouts: one change to one component at one moment, and the scope it reached (ETT_SPEC §6)."""
