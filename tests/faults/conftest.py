"""One embedded stack for the fault-and-bad-input suite: an MLflow tracking server on
loopback, a storage root in a temporary folder, the ``spark_jobs`` archive packaged for
this session (so a colleague's concurrent run cannot swap it underneath), and one clean
curated partition that the training and registry tests read."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from spark_sessions import local_session

from faults_support import BASE_DS, BASE_ROWS, BASE_SEED, EXPERIMENT, WORKFLOW, JobRunner
from local_stack import LocalStack, free_port
from ml_platform.job_arguments import IngestArguments
from package_jobs import package_jobs


@dataclass
class FaultsStack:
    stack: LocalStack
    jobs: JobRunner
    archive: Path

    @property
    def root(self) -> Path:
        return self.stack.storage_root

    def dataset(self, name: str) -> Path:
        return self.root / name / "mnist"

    def raw_drop(self, ds: str) -> Path:
        return self.dataset("raw") / f"ds={ds}"

    def ingest_args(self, ds: str, raw_path: Path | None = None, *extra: str, **fields: Any) -> list[str]:
        """The ingest job's command line for day ``ds`` of this stack's datasets (``fields``
        override IngestArguments' fields), then ``extra``."""
        arguments = IngestArguments(
            **{
                "workflow": WORKFLOW,
                "ds": ds,
                "raw_path": raw_path or self.raw_drop(ds),
                "curated_root": self.dataset("curated"),
                "quarantine_root": self.dataset("quarantine"),
                **fields,
            }
        )
        return [*arguments.argv(), *extra]


@pytest.fixture(scope="session")
def faults_stack(tmp_path_factory: pytest.TempPathFactory):
    state = tmp_path_factory.mktemp("faults")
    archive = package_jobs(state / "spark_jobs.zip")
    stack = LocalStack(
        state_dir=state,
        mlflow_port=free_port(),
        api_port=free_port(),
        extra_env={"ML_JOBS_ARCHIVE": str(archive), "ML_MNIST_EXPERIMENT_NAME": EXPERIMENT},
    )
    # Jobs started directly (not through the operator) get the URI the operator would give them.
    jobs = JobRunner(
        env={**stack.env(), "MLFLOW_TRACKING_URI": stack.tracking_uri}, archive=archive, log_dir=state / "job-logs"
    )
    try:
        yield FaultsStack(stack, jobs, archive)
    finally:
        stack.stop_mlflow()


@pytest.fixture(scope="session")
def mlflow_client(faults_stack):
    """The suite's MLflow server (started on first use: the ingest tests need none) and a client."""
    from mlflow import MlflowClient

    faults_stack.stack.start_mlflow()
    return MlflowClient(tracking_uri=faults_stack.stack.tracking_uri, registry_uri=faults_stack.stack.tracking_uri)


@pytest.fixture(scope="session")
def ingest_spark():
    """A local[2] session configured like the jobs' (reused if the unit tests made one):
    for set-up data and for the bad-file cases, which need no JVM start each."""
    return local_session("faults")


@pytest.fixture(scope="session")
def base_partition(faults_stack, ingest_spark) -> str:
    """A clean curated partition of BASE_ROWS rows, for the training and registry tests."""
    from spark_jobs import workflows
    from spark_jobs.ingest import ingest_partition
    from spark_jobs.sample_data import write_drop

    write_drop(WORKFLOW, faults_stack.dataset("raw"), BASE_DS, BASE_ROWS, seed=BASE_SEED)
    report = ingest_partition(
        ingest_spark,
        workflow=workflows.load(WORKFLOW),
        raw_path=str(faults_stack.raw_drop(BASE_DS)),
        ds=BASE_DS,
        curated_root=str(faults_stack.dataset("curated")),
        quarantine_root=str(faults_stack.dataset("quarantine")),
        max_bad_ratio=0.0,
    )
    assert report.rows_curated == BASE_ROWS
    return BASE_DS
