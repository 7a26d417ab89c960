"""MLflow with its artifact store in a blob container (Azurite): the server is started with
``--artifacts-destination wasbs://mlflow@<account>.blob.core.windows.net/artifacts`` and the
storage connection string in its environment only. Clients (the training job, this test)
log and load through the server, without storage credentials of their own.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from azure_support import ARTIFACTS_CONTAINER
from spark_jobs.sample_data import make_rows


def test_artifact_round_trip_through_the_server(azure_stack, blob_service, monkeypatch):
    import mlflow

    monkeypatch.delenv("AZURE_STORAGE_CONNECTION_STRING", raising=False)
    mlflow.set_tracking_uri(azure_stack.tracking_uri)
    try:
        mlflow.set_experiment("azure-artifacts")
        with mlflow.start_run() as run:
            mlflow.log_text("window 2026-11-26..2026-11-28\n", "notes/window.txt")
        read_back = mlflow.artifacts.load_text(f"runs:/{run.info.run_id}/notes/window.txt")
    finally:
        mlflow.set_tracking_uri(None)
    assert read_back == "window 2026-11-26..2026-11-28\n"
    container = blob_service.get_container_client(ARTIFACTS_CONTAINER)
    suffix = f"{run.info.run_id}/artifacts/notes/window.txt"
    (name,) = [blob.name for blob in container.list_blobs(name_starts_with="artifacts/") if blob.name.endswith(suffix)]
    assert container.download_blob(name).readall() == read_back.encode()


def test_trained_model_is_stored_in_the_container_and_loads(
    resumed_training, azure_stack, blob_service, azurite, tmp_path, monkeypatch
):
    import mlflow

    manifest, _ = resumed_training
    monkeypatch.delenv("AZURE_STORAGE_CONNECTION_STRING", raising=False)
    mlflow.set_tracking_uri(azure_stack.tracking_uri)
    try:
        downloaded = Path(mlflow.artifacts.download_artifacts(manifest["model_uri"], dst_path=str(tmp_path)))
        model = mlflow.pyfunc.load_model(manifest["model_uri"])
    finally:
        mlflow.set_tracking_uri(None)

    # Every file the server hands back is a blob of the container, byte for byte.
    container = blob_service.get_container_client(ARTIFACTS_CONTAINER)
    blobs = [blob.name for blob in container.list_blobs(name_starts_with="artifacts/")]
    # (registered_model_meta is written by the download itself, not stored.)
    files = [f for f in downloaded.rglob("*") if f.is_file() and f.name != "registered_model_meta"]
    assert "MLmodel" in {f.name for f in files}
    for file in files:
        relative = file.relative_to(downloaded).as_posix()
        candidates = [name for name in blobs if name.endswith(f"/{relative}")]
        assert any(container.download_blob(name).readall() == file.read_bytes() for name in candidates), relative

    # Images as the curated table's features column decodes them: uint8 [n, 28, 28].
    _, images = make_rows("mnist", "2026-11-28", 4, seed=3)
    probs = np.asarray(model.predict(images))
    assert probs.shape == (4, 10)
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, rtol=1e-4)
    assert azurite.key not in (azure_stack.state_dir / "mlflow" / "server.log").read_text(errors="replace")
