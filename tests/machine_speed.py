"""This machine's speed, as the suite reads its own times: the CPU time of a fixed pure-Python
loop. It varies by tens of percent from day to day here (0.72 CPU s on 2026-12-06 07:50, 1.36
on 2026-12-06 19:03, the same suite's groups 1.2-1.5x as long), so a test that holds a CPU
time to a limit states the limit for a reference speed and scales it by the measured one."""

from __future__ import annotations

import time

SPEED_LOOP = 20_000_000
# The loop's CPU time on the machine the suite's CPU-time limits were set on (2026-12-06).
REFERENCE_LOOP_S = 0.72


def loop_cpu_seconds(loop: int = SPEED_LOOP) -> float:
    """The CPU seconds of ``loop`` additions in a Python loop."""
    started = time.process_time()
    total = 0
    for i in range(loop):
        total += i
    return time.process_time() - started


def slowdown(repeats: int = 3) -> float:
    """How much slower than the reference this machine runs now (never below 1: a limit is
    not tightened on a faster machine); the median of ``repeats`` loops (here one loop took
    0.76 CPU s and another 1.26 within a minute, 2026-12-07: the fastest is an outlier)."""
    import statistics

    return max(1.0, statistics.median(loop_cpu_seconds() for _ in range(repeats)) / REFERENCE_LOOP_S)
