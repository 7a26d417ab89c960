"""The Azure deployment on loopback: Azurite (the Azure Storage emulator's Blob service) for
the landing zone, MLflow's artifact store and training checkpoints, started once per session
on free ports with a storage account key made up for the session.

Azurite comes from npm; ``scripts/setup_env.sh --dev`` installs it (``make test`` does). Tests
that need it skip, naming it, where it is missing. Azure Synapse is a cloud service that cannot
run here: the Synapse tests check the payload the DAGs would send it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import package_jobs
from azure_support import (
    ARTIFACTS_CONTAINER,
    CHECKPOINTS_URL,
    EPOCHS,
    KILL_AT,
    LANDING_CONN_ID,
    TRAIN_DS,
    TRAIN_ROWS,
    checkpoints,
)
from local_stack import Azurite, LocalStack, free_port, write_curated_partition
from ml_platform.job_arguments import TrainArguments
from process_markers import wait_for_no_marked_processes


@pytest.fixture(scope="session")
def azurite(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Azurite]:
    emulator = Azurite(state_dir=tmp_path_factory.mktemp("azurite"))
    if not emulator.executable().exists():
        pytest.fail(f"Azurite not installed at {emulator.executable()}: run scripts/setup_env.sh --dev (needs npm)")
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
    azure_stack: LocalStack, tmp_path_factory: pytest.TempPathFactory, report_figure, blob_service
) -> Callable[..., tuple[dict, str]]:
    """``train_job(name, backend, epochs, checkpoint_dir, kill_at_checkpoint=None)``: the train
    entry point through spark-submit on the Azure stack (2 ranks, one small curated partition),
    run once per ``name``; returns its manifest and output (the command line, then stdout and
    stderr). The job finds the storage credentials for checkpoints in its environment, as on a
    cluster, never on its command line.

    With ``kill_at_checkpoint=n`` the job's whole process group is SIGKILLed as soon as a
    checkpoint of epoch ``n`` or later is in the container (a worker lost mid-run); the
    manifest is then ``{"killed": True, "orphans": [...]}`` with the live processes of the
    job left behind, if any."""
    root = tmp_path_factory.mktemp("train")
    archive = package_jobs.package_jobs(root / "spark_jobs.zip")
    write_curated_partition(root / "curated", TRAIN_DS, TRAIN_ROWS)
    runs: dict[str, tuple[dict, str]] = {}

    def latest_checkpoint(checkpoint_dir: str) -> int:
        from azure.core.exceptions import ResourceNotFoundError

        container, _, prefix = checkpoint_dir.removeprefix("abfs://").partition("/")
        try:  # the job creates the container with its first checkpoint
            names = [
                b.name for b in blob_service.get_container_client(container).list_blobs(name_starts_with=f"{prefix}/")
            ]
        except ResourceNotFoundError:
            return 0
        return max((int(n[-7:-3]) for n in names if n.endswith(".pt")), default=0)

    def run(
        name: str, backend: str, epochs: int, checkpoint_dir: str, kill_at_checkpoint: int | None = None
    ) -> tuple[dict, str]:
        if name not in runs:
            work = root / name
            work.mkdir()
            args = TrainArguments(
                workflow="mnist",
                curated_root=root / "curated",
                start_ds=TRAIN_DS,
                end_ds=TRAIN_DS,
                work_dir=work / "scratch",
                output_manifest=work / "train.json",
                experiment_name="azure-training",
                backend=backend,
                epochs=epochs,
                num_ranks=2,
                checkpoint_dir=checkpoint_dir,
            ).argv()
            started = time.monotonic()
            if kill_at_checkpoint is None:
                proc = azure_stack.spark_submit("train", args, archive=archive, cwd=work, timeout=300)
                output = "\n".join([" ".join(proc.args), proc.stdout, proc.stderr])
                assert proc.returncode == 0, f"{name} failed:\n{output[-8000:]}"
                runs[name] = json.loads((work / "train.json").read_text()), output
            else:
                runs[name] = killed_at_checkpoint(work, args, checkpoint_dir, kill_at_checkpoint)
            report_figure(f"azure training {name} ({backend}, {epochs} epochs): {time.monotonic() - started:.1f} s")
        return runs[name]

    def killed_at_checkpoint(work: Path, args: list[str], checkpoint_dir: str, epoch: int) -> tuple[dict, str]:
        cmd, env = azure_stack.spark_submit_command("train", args, archive=archive)
        marker = uuid.uuid4().hex
        log_path = work / "output.log"
        with open(log_path, "wb") as out:
            proc = subprocess.Popen(
                cmd,
                cwd=work,
                env={**env, KILL_MARKER: marker},
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + 300
        while proc.poll() is None and time.monotonic() < deadline and latest_checkpoint(checkpoint_dir) < epoch:
            time.sleep(0.05)
        running = proc.poll() is None
        if running:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        output = "\n".join([" ".join(cmd), log_path.read_text(errors="replace")])
        assert running, (
            f"the job ended (rc {proc.returncode}) before its checkpoint of epoch {epoch}:\n{output[-8000:]}"
        )
        return {"killed": True, "orphans": wait_for_no_marked_processes(KILL_MARKER, marker)}, output

    return run


KILL_MARKER = "AZURE_TEST_JOB_MARKER"


@pytest.fixture(scope="session")
def interrupted_training(train_job, blob_service) -> dict:
    """The first try of a run (TorchDistributor), SIGKILLed once its checkpoint of epoch
    KILL_AT is in the container: its output, processes left behind, and the checkpoints it
    left (read before any retry)."""
    killed, output = train_job("interrupted", "torch_distributor", EPOCHS, CHECKPOINTS_URL, kill_at_checkpoint=KILL_AT)
    return {**killed, "output": output, "checkpoints": checkpoints(blob_service, CHECKPOINTS_URL)}


@pytest.fixture(scope="session")
def resumed_training(interrupted_training, train_job) -> tuple[dict, str]:
    """The retry (Horovod, the same epochs and checkpoint folder), run to success."""
    return train_job("retry", "horovod", EPOCHS, CHECKPOINTS_URL)
