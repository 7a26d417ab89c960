"""One platform for the tests of this folder (one process runs them all, see
``tests/conftest.py``): ``scripts/platform_stack.py up`` on a state folder and free ports
of its own, with a job archive of the code under test and one curated MNIST partition to
train on. The browser tests use it first; the up/down tests, which end by stopping it,
come last (collection order)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from platform_support import CURATED_DS, CURATED_ROWS, PlatformCli

import package_jobs
from spark_jobs import workflows
from spark_jobs.sample_data import make_rows
from spark_jobs.schema import curated_arrow_table, partition_path


@pytest.fixture(scope="session")
def shared_platform(tmp_path_factory):
    """``(cli, the output of its first up)``; down at the end of the session."""
    cli = PlatformCli(tmp_path_factory.mktemp("platform"))
    cli.env["ML_JOBS_ARCHIVE"] = str(package_jobs.package_jobs(cli.state / "spark_jobs.zip"))
    wf = workflows.load("mnist")
    labels, features = make_rows(wf, CURATED_DS, CURATED_ROWS)
    partition = Path(partition_path(cli.state / "data" / "curated" / "mnist", CURATED_DS))
    partition.mkdir(parents=True)
    table = curated_arrow_table(wf, np.arange(CURATED_ROWS), labels, features)
    pq.write_table(table, partition / "part-00000.parquet")
    first = cli("up")
    try:
        yield cli, first
    finally:
        cli("down")
