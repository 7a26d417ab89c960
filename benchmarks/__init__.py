"""Benchmarks: every step of the platform measured against its ceiling, in one run.

``python -m benchmarks`` (``make bench``) generates its own data, runs each benchmark
side by side with its baselines, and writes ``benchmarks/results/`` (results.md,
results.json, plots). See docs/performance.md and ``--help``.
"""

import spark_jobs  # noqa: F401, E402 - from the source tree, puts plugins/ (the contract, ml_contract) on sys.path
