"""The checks of what was scored: each day's report, in Airflow's terms.

The score job compares every day it writes with the pinned version's reference profile and
writes ``<monitoring root>/ds=<day>/drift.json`` (``spark_jobs/monitoring.py``); the label
feedback job writes ``labels.json`` beside it (``spark_jobs/feedback.py``). These tasks read
those reports, log each day's outcome and what moved, and return them (the XCom the
retraining evidence and the "Drift report" link read). They read files only: no Spark job,
no model, a second or so after the job.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator

from ml_contract.layout import days_between
from ml_registry.hooks import MlflowRegistryHook
from ml_registry.links import DriftReportLink, LabelReportLink

if TYPE_CHECKING:
    from airflow.sdk import Context

DRIFT, NO_DRIFT = "drift", "no_drift"
DEGRADED = "degraded"


def summarise(reports: dict[str, dict[str, Any]], ui_url: str, flagged: str = DRIFT) -> dict[str, Any]:
    """The check's return value: each day's outcome, what moved and where its report is; the
    days whose outcome is ``flagged`` (``drifted``), most statistics moved first."""
    days: dict[str, dict[str, Any]] = {
        ds: {
            "outcome": report.get("outcome"),
            "moved": list(report.get("moved", [])),
            "rows": report.get("rows"),
            "model": report.get("model"),
            "run_id": report.get("run_id"),
            "experiment_id": report.get("experiment_id"),
            "artifact": report.get("artifact"),
        }
        for ds, report in sorted(reports.items())
    }
    moved = {ds: len(day["moved"]) for ds, day in days.items() if day["outcome"] == flagged}
    drifted = sorted(moved, key=lambda ds: -moved[ds])
    return {"ui_url": ui_url, "days": days, "drifted": drifted}


class DriftCheckOperator(BaseOperator):
    """
    Read the drift reports of the days ``start_ds..end_ds`` that the score job wrote.

    Fails when a scored day has no report (the scoring ran without its check); a day whose
    version has no reference profile is reported as ``no_reference``, not as drift.

    :param monitoring_root: where the score job wrote the reports (a URI, templated).
    :param start_ds: first day (templated); ``end_ds`` the last (default: the same day).
    :param storage_conn_id: connection of the storage (object storage), None for local files.
    :param mlflow_conn_id: the MLflow connection, for the UI's address in the link.
    """

    template_fields: Sequence[str] = ("monitoring_root", "start_ds", "end_ds")
    operator_extra_links = (DriftReportLink(),)
    ui_color = "#fdf2e0"
    report_file, flagged, what = "drift.json", DRIFT, "drift report"

    def __init__(
        self,
        *,
        monitoring_root: str,
        start_ds: str,
        end_ds: str | None = None,
        storage_conn_id: str | None = None,
        mlflow_conn_id: str = MlflowRegistryHook.default_conn_name,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.monitoring_root = monitoring_root
        self.start_ds = start_ds
        self.end_ds = end_ds
        self.storage_conn_id = storage_conn_id
        self.mlflow_conn_id = mlflow_conn_id

    def execute(self, context: Context) -> dict[str, Any]:
        from airflow.sdk import ObjectStoragePath

        reports = {}
        missing = []
        for ds in days_between(self.start_ds, self.end_ds or self.start_ds):
            path = ObjectStoragePath(
                f"{self.monitoring_root.rstrip('/')}/ds={ds}/{self.report_file}", conn_id=self.storage_conn_id
            )
            if not path.exists():
                missing.append(f"{ds} ({path})")
                continue
            reports[ds] = json.loads(path.read_text())
        if missing:
            raise FileNotFoundError(
                f"no {self.what} for {', '.join(missing)}: did the job before this task judge the day?"
            )
        result = summarise(reports, MlflowRegistryHook(self.mlflow_conn_id).ui_url, self.flagged)
        for ds, day in result["days"].items():
            moved = f": {', '.join(day['moved'])} moved" if day["moved"] else ""
            self.log.info("%s scored by %s: %s%s (%s rows)", ds, day["model"], day["outcome"], moved, day["rows"])
        return result


class LabelCheckOperator(DriftCheckOperator):
    """Read the label feedback reports (``labels.json``) of the days ``start_ds..end_ds``:
    a day is flagged ``degraded`` when a version's realised metric fell past the tolerance."""

    operator_extra_links = (LabelReportLink(),)
    report_file, flagged, what = "labels.json", DEGRADED, "label feedback report"
