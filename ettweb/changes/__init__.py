"""Unrecorded changes (ETT_SPEC §6.3): level shifts in each component's daily lost share."""
