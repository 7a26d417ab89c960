"""The Azure deployment on loopback: Azurite (the Azure Storage emulator's Blob service) for
the landing zone, MLflow's artifact store and training checkpoints, started once per session
on free ports with a storage account key made up for the session.

Azurite comes from npm; ``scripts/setup_env.sh --dev`` installs it (``make test`` does). Tests
that need it skip, naming it, where it is missing. Azure Synapse is a cloud service that cannot
run here: the Synapse tests check the payload the DAGs would send it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator

import pytest

import package_jobs
from azure_support import ARTIFACTS_CONTAINER, CHECKPOINTS_URL, LANDING_CONN_ID, REPO, TRAIN_DS, TRAIN_ROWS
from local_stack import Azurite, LocalStack, free_port, write_curated_partition


@pytest.fixture(scope="session")
def azurite(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Azurite]:
    emulator = Azurite(state_dir=tmp_path_factory.mktemp("azurite"))
    if not emulator.executable().exists():
        pytest.skip(f"Azurite not installed at {emulator.executable()}: run scripts/setup_env.sh --dev (needs npm)")
    emulator.start()
    try:
        yield emulator
    finally:
        emulator.stop()


@pytest.fixture(scope="session")
def blob_service(azurite: Azurite):
    from azure.storage.blob import BlobServiceClient

    return BlobServiceClient.from_connection_string(azurite.connection_string)


@pytest.fixture
def wasb_conn(monkeypatch: pytest.MonkeyPatch, azurite: Azurite) -> str:
    """A ``wasb`` connection to Azurite, given the way deployments do: an env var."""
    conn = {"conn_type": "wasb", "extra": {"connection_string": azurite.connection_string}}
    monkeypatch.setenv(f"AIRFLOW_CONN_{LANDING_CONN_ID.upper()}", json.dumps(conn))
    return LANDING_CONN_ID


@pytest.fixture(scope="session")
def azure_stack(tmp_path_factory: pytest.TempPathFactory, azurite: Azurite, blob_service) -> Iterator[LocalStack]:
    """The embedded stack whose MLflow server keeps artifacts in an Azurite container.

    Only the server (and the jobs, for checkpoints) get the storage credentials, in their
    environment; MLflow clients upload and download through the server.
    """
    blob_service.create_container(ARTIFACTS_CONTAINER)
    stack = LocalStack(
        state_dir=tmp_path_factory.mktemp("azure-stack"),
        mlflow_port=free_port(),
        artifacts_destination=azurite.wasbs_uri(ARTIFACTS_CONTAINER, "artifacts"),
        extra_env={"AZURE_STORAGE_CONNECTION_STRING": azurite.connection_string},
    )
    stack.start_mlflow()
    try:
        yield stack
    finally:
        stack.stop_mlflow()


@pytest.fixture(scope="session")
def train_job(
    azure_stack: LocalStack, tmp_path_factory: pytest.TempPathFactory, report_figure
) -> Callable[..., tuple[dict, str]]:
    """``train_job(name, backend, epochs, checkpoint_dir)``: the train entry point through
    spark-submit on the Azure stack (2 ranks, one small curated partition), run once per
    ``name``; returns its manifest and output (the command line, then stdout and stderr).
    The job finds the storage credentials for checkpoints in its environment, as on a
    cluster, never on its command line."""
    root = tmp_path_factory.mktemp("train")
    archive = package_jobs.package_jobs(root / "spark_jobs.zip")
    write_curated_partition(root / "curated", TRAIN_DS, TRAIN_ROWS)
    runs: dict[str, tuple[dict, str]] = {}

    def run(name: str, backend: str, epochs: int, checkpoint_dir: str) -> tuple[dict, str]:
        if name not in runs:
            work = root / name
            work.mkdir()
            args = [
                "--curated-root", str(root / "curated"),
                "--start-ds", TRAIN_DS,
                "--end-ds", TRAIN_DS,
                "--work-dir", str(work / "scratch"),
                "--output-manifest", str(work / "train.json"),
                "--experiment-name", "azure-training",
                "--backend", backend,
                "--epochs", str(epochs),
                "--num-ranks", "2",
                "--checkpoint-dir", checkpoint_dir,
            ]
            started = time.monotonic()
            proc = azure_stack.spark_submit("train", args, archive=archive, cwd=work, timeout=300)
            report_figure(f"azure training {name} ({backend}, {epochs} epochs): {time.monotonic() - started:.1f} s")
            output = "\n".join([" ".join(proc.args), proc.stdout, proc.stderr])
            assert proc.returncode == 0, f"{name} failed:\n{output[-8000:]}"
            runs[name] = json.loads((work / "train.json").read_text()), output
        return runs[name]

    return run


@pytest.fixture(scope="session")
def first_training(train_job) -> tuple[dict, str]:
    """Two epochs with TorchDistributor, checkpointed to blob storage: the first try of a run."""
    return train_job("first", "torch_distributor", 2, CHECKPOINTS_URL)
