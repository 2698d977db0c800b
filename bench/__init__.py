"""Benchmarks: ``python -m bench.NAME``; the last line each prints is one JSON object.

The JSON line is what CI and the lead compare across commits; the human table above it is
for whoever runs the benchmark by hand.
"""
