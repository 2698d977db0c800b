"""Attribution engine: turns one job's events into ETT% and lost time (ETT_SPEC §3-§5).

Pure Python on purpose: the offline report, the web workers and the benchmarks all run the
same code, so a number on a dashboard can always be reproduced from a JSONL file.
"""
