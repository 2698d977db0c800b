"""GPU-size buckets: jobs of similar size fail and restart alike, so owners compare like with
like. Defined beside the rollups because the label sums (``LabelDayRollup``) are kept per
bucket; the query layer re-exports them."""

from __future__ import annotations

from typing import Final

#: (lowest, highest or None, label).
GPU_BUCKETS: Final = ((1, 1, "1"), (2, 8, "2-8"), (9, 64, "9-64"), (65, 512, "65-512"),
                      (513, None, "513+"))
GPU_BUCKET_LABELS: Final = tuple(label for _, _, label in GPU_BUCKETS)


def gpu_bucket(gpus: int) -> str:
    """The GPU-size bucket label of a job holding ``gpus`` accelerators."""
    for low, high, label in GPU_BUCKETS:
        if gpus >= low and (high is None or gpus <= high):
            return label
    return GPU_BUCKETS[0][2]


def bucket_sql(column: str) -> str:
    """The same bucket as a SQL expression over an integer ``column``."""
    cases = " ".join(f"WHEN {column} <= {high} THEN '{label}'"
                     for _, high, label in GPU_BUCKETS if high is not None)
    return f"(CASE {cases} ELSE '{GPU_BUCKETS[-1][2]}' END)"
