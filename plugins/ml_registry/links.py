"""Extra links to the MLflow UI: from a gate task to the model version it pinned, from a
drift check to the day's report."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from airflow.sdk import BaseOperatorLink

if TYPE_CHECKING:
    from airflow.sdk import BaseOperator
    from airflow.sdk.types import TaskInstanceKey


def model_version_url(ui_url: str, name: str, version: str | int) -> str:
    """``<ui>/#/models/<name>/versions/<version>``, the MLflow UI's model version page."""
    return f"{ui_url.rstrip('/')}/#/models/{quote(name, safe='')}/versions/{quote(str(version), safe='')}"


def link_from_selection(selection: Any) -> str:
    """The link for a gate's XCom payload; empty when the gate pinned nothing (failed, skipped)."""
    if not isinstance(selection, dict):
        return ""
    try:
        return model_version_url(selection["ui_url"], selection["name"], selection["version"])
    except (KeyError, TypeError, AttributeError):
        return ""


class MlflowModelVersionLink(BaseOperatorLink):
    """
    "MLflow model version": the registry page of the version the gate pinned.

    Airflow 3 calls ``get_link`` in the worker right after the task ends and stores the URL
    as an XCom, which is what the UI shows; the URL is built from the gate's own return value
    (which carries ``ui_url``), so no connection (and no secret) is looked up for it.

    ``operators`` stays empty on purpose: a plugin link bound to an operator class would be
    evaluated in the API server, where the Task SDK's XCom client does not work.
    """

    name = "MLflow model version"

    def get_link(self, operator: BaseOperator, *, ti_key: TaskInstanceKey) -> str:
        from airflow.sdk.execution_time.xcom import XCom

        # The worker passes its task instance, state included: a failed or skipped gate
        # pinned nothing, and asking for its XCom would only log a "not found" error.
        if getattr(ti_key, "state", None) not in (None, "success"):
            return ""
        return link_from_selection(XCom.get_value(ti_key=ti_key, key="return_value"))


def run_artifact_url(ui_url: str, experiment_id: str, run_id: str, path: str) -> str:
    """``<ui>/#/experiments/<id>/runs/<run>/artifactPath/<path>``: an artifact of a run in the MLflow UI."""
    return (
        f"{ui_url.rstrip('/')}/#/experiments/{quote(str(experiment_id), safe='')}/runs/{quote(run_id, safe='')}"
        f"/artifactPath/{quote(path)}"
    )


def link_from_drift_check(result: Any) -> str:
    """The report of the check's most-shifted day (else its last day); empty when it checked nothing."""
    if not isinstance(result, dict):
        return ""
    try:
        days = result["days"]
        shown = (result.get("drifted") or sorted(days)[-1:])[0]
        day = days[shown]
        return run_artifact_url(result["ui_url"], day["experiment_id"], day["run_id"], day["artifact"])
    except (KeyError, TypeError, AttributeError, IndexError):
        return ""


class DriftReportLink(BaseOperatorLink):
    """
    "Drift report": the day's drift report (its plot) among the pinned version's artifacts in
    the MLflow UI, from the drift check's own return value (as :class:`MlflowModelVersionLink`).
    """

    name = "Drift report"

    def get_link(self, operator: BaseOperator, *, ti_key: TaskInstanceKey) -> str:
        from airflow.sdk.execution_time.xcom import XCom

        if getattr(ti_key, "state", None) not in (None, "success"):
            return ""
        return link_from_drift_check(XCom.get_value(ti_key=ti_key, key="return_value"))


class LabelReportLink(DriftReportLink):
    """ "Label feedback report": the day's realised-metric report among the version's artifacts."""

    name = "Label feedback report"
