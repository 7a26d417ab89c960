"""The MNIST workflow's CNN, trained briefly in the test process and logged the way the train
job logs it (imported by name: tests/ is on sys.path). For tests whose subject is not
training: seconds instead of a Horovod job."""

from __future__ import annotations

from typing import Any

WORKFLOW = "mnist"
MODEL = "mnist_cnn"


def briefly_trained_cnn(ds: str, rows: int = 2000, steps: int = 150, seed: int = 11) -> dict[str, Any]:
    """The CNN's state after ``steps`` SGD steps (batch 32) on ``rows`` generated rows of
    ``ds``: about 0.75 held-out accuracy, where an untrained one has about 0.1."""
    import numpy as np
    import torch
    import torch.nn.functional as F

    from spark_jobs import workflows
    from spark_jobs.sample_data import make_rows

    workflow = workflows.load(WORKFLOW)
    labels, images = make_rows(workflow, ds, rows, seed=seed)
    # The images as the curated table holds them (uint8 [n, 28, 28]); class indices for the loss.
    x, y = torch.from_numpy(images), torch.from_numpy(labels.astype(np.int64))
    torch.manual_seed(0)
    net = workflows.model_factory(workflow)()
    optimizer = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.5)
    for _step in range(steps):
        batch = torch.randint(0, rows, (32,))
        optimizer.zero_grad()
        F.nll_loss(net(x[batch]), y[batch]).backward()
        optimizer.step()
    return net.state_dict()


def log_cnn_run(tracking_uri: str, experiment: str, tags: dict[str, str], state_dict) -> tuple[str, str]:
    """An MLflow run of ``experiment`` with the CNN logged as the train job logs it
    (``spark_jobs.training.model_logging``: TorchScript serving form, tensor signature uint8
    ``[-1, 28, 28]``, input example, the workflow in its metadata); (run id, model URI).

    The server is set for the call only (MLflow then falls back to its environment again):
    this process may point elsewhere meanwhile."""
    import mlflow
    import numpy as np

    from spark_jobs import workflows
    from spark_jobs.training.model_logging import log_serving_model

    workflow = workflows.load(WORKFLOW)
    example = np.zeros((2, *workflow.features.shape), dtype=workflow.features.dtype)
    client = mlflow.MlflowClient(tracking_uri=tracking_uri)
    found = client.get_experiment_by_name(experiment)
    experiment_id = found.experiment_id if found else client.create_experiment(experiment)
    mlflow.set_tracking_uri(tracking_uri)
    try:
        with mlflow.start_run(experiment_id=experiment_id, tags=tags) as run:
            model_uri = log_serving_model(workflow, state_dict, example)
    finally:
        mlflow.set_tracking_uri(None)
    return run.info.run_id, model_uri


def register_quick_champion(tracking_uri: str, rows: int = 2000, steps: int = 150) -> str:
    """The MNIST workflow's CNN trained briefly in-process (above), logged as the
    train job logs it, registered and made a passed ``champion``; returns the version. For
    tests whose subject is not training."""
    import mlflow
    from mlflow import MlflowClient

    _, model_uri = log_cnn_run(tracking_uri, MODEL, {}, briefly_trained_cnn("2026-10-01", rows, steps, seed=11))
    mlflow.set_tracking_uri(tracking_uri)
    try:
        info = mlflow.register_model(model_uri, MODEL)
    finally:
        mlflow.set_tracking_uri(None)
    client = MlflowClient(tracking_uri=tracking_uri)
    version = str(info.version)
    client.set_model_version_tag(MODEL, version, "validation_status", "passed")
    client.set_registered_model_alias(MODEL, "champion", version)
    return version
