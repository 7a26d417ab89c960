"""Shared by the Azure test modules (imported by name: tests/azure is on sys.path)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pendulum

REPO = Path(__file__).resolve().parents[2]
LANDING_CONN_ID = "wasb_landing"
ARTIFACTS_CONTAINER = "mlflow"
PINNED_MODEL_URI = "models:/mnist_cnn/3"
TRAIN_DS, TRAIN_ROWS = "2026-11-28", 400
# adlfs's form: container, then path; the account comes from the connection string.
CHECKPOINTS_CONTAINER = "checkpoints"
CHECKPOINTS_URL = f"abfs://{CHECKPOINTS_CONTAINER}/mnist_nightly_retrain/run-1"
# The interrupted try asks for EPOCHS and is killed once the checkpoint of epoch KILL_AT exists
# (so epoch KILL_AT - 1's checkpoint, and its removal of the one before, are done).
EPOCHS, KILL_AT = 12, 3


def pulled(key: str, task_ids: Any, when: Any) -> Any:
    """What a task pulls: the evidence a retraining starts from (``check_evidence``), else the
    gate's result, one XCom per key (multiple_outputs), as the scoring task pulls it."""
    if task_ids == "check_evidence":
        day = when.subtract(days=1).date().isoformat()
        return {"end_ds": day, "days": [day], "reasons": ["drift"]}
    return PINNED_MODEL_URI if key == "uri" else {"uri": PINNED_MODEL_URI}


def render(task: Any, logical_date: str = "2026-11-29T02:00:00+00:00") -> dict[str, Any]:
    """Render ``task``'s templates for a run at ``logical_date`` (an empty data interval, like
    the nightly's) and return the context to execute it with: Airflow's task runner, minus
    the metadata database (XCom answers with a pinned model URI, or the retraining's evidence
    of the day before, and takes nothing)."""
    when = pendulum.parse(logical_date)
    dag = task.dag
    context = {
        "dag": dag,
        "dag_run": SimpleNamespace(
            logical_date=when, run_after=when, data_interval_start=when, data_interval_end=when, conf={}
        ),
        "run_id": f"scheduled__{when.isoformat()}",
        "params": {name: dag.params[name] for name in dag.params},
        "ti": SimpleNamespace(
            xcom_pull=lambda key="return_value", task_ids=None, **_: pulled(key, task_ids, when),
            xcom_push=lambda **_: None,
            get_first_reschedule_date=lambda _context: None,  # the sensor's first poke
        ),
    }
    task.render_template_fields(context)
    return context


def checkpoints(blob_service, url: str) -> dict[str, dict]:
    """A run's checkpoints on Azurite by blob name, loaded (partial writes left out)."""
    import io

    import torch
    from azure.core.exceptions import ResourceNotFoundError

    container_name, _, prefix = url.removeprefix("abfs://").partition("/")
    container = blob_service.get_container_client(container_name)
    try:
        names = [b.name for b in container.list_blobs(name_starts_with=f"{prefix}/") if b.name.endswith(".pt")]
    except ResourceNotFoundError:
        return {}
    return {name: torch.load(io.BytesIO(container.download_blob(name).readall()), weights_only=True) for name in names}
