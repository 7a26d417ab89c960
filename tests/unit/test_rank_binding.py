"""Each rank bound to cores of its own (spark_jobs.training.launch.rank_cores), as
``mpirun --bind-to core`` binds its ranks, only where a host's ranks fill its cores exactly."""

from __future__ import annotations

import pytest

from spark_jobs.training.launch import rank_cores


@pytest.mark.parametrize(
    ("local_rank", "local_size", "threads", "cores", "bound"),
    [
        (0, 2, 1, [0, 1], {0}),
        (1, 2, 1, [0, 1], {1}),
        (1, 2, 2, [0, 1, 2, 3], {2, 3}),
        (2, 3, 1, [4, 9, 11], {11}),  # the cores this process may use, in order, not 0..N
    ],
)
def test_rank_i_takes_the_ith_block_of_the_cores_its_host_ranks_fill(local_rank, local_size, threads, cores, bound):
    assert rank_cores(local_rank, local_size, threads, cores) == bound


@pytest.mark.parametrize(
    ("local_rank", "local_size", "threads", "cores"),
    [
        (0, 2, 1, [0, 1, 2, 3]),  # a host shared with other executors: their ranks count from 0 too
        (0, 4, 1, [0, 1]),  # more ranks than cores
        (0, 2, 2, [0, 1]),  # more threads than cores
        (2, 2, 1, [0, 1]),  # not a local rank of this host
    ],
)
def test_nothing_is_bound_unless_the_ranks_fill_the_cores_exactly(local_rank, local_size, threads, cores):
    assert rank_cores(local_rank, local_size, threads, cores) == set()


def test_a_rank_knows_when_its_process_was_created_to_within_a_few_hundredths_of_a_second():
    """The start-up timeline's ``rank_process_started`` (``process_started_at``): a process
    started between two readings of the clock says it was created between them, whatever
    it imported since (psutil's create_time can be a second off: whole-second boot time)."""
    import subprocess
    import sys
    import time

    from local_stack import REPO

    code = "import time; time.sleep(0.5); from spark_jobs.training.launch import process_started_at as p; print(p())"
    before = time.time()
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    created = float(out.stdout)
    assert before - 0.05 <= created <= before + 0.4, (before, created)  # not the 0.5 s it slept
