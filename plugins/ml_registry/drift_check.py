"""The drift check of a scoring run: what each scored day's report says, in Airflow's terms.

The score job compares every day it writes with the pinned version's reference profile and
writes ``<monitoring root>/ds=<day>/drift.json`` (``spark_jobs/monitoring.py``); this task
reads those reports, logs each day's outcome and what moved, and returns them (the XCom the
retraining evidence and the "Drift report" link read). It reads files only: no Spark job, no
model, a second or so after the scoring.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator

from ml_registry.hooks import MlflowRegistryHook
from ml_registry.links import DriftReportLink

if TYPE_CHECKING:
    from airflow.sdk import Context

DRIFT, NO_DRIFT = "drift", "no_drift"


def days_between(start_ds: str, end_ds: str) -> list[str]:
    start, end = dt.date.fromisoformat(start_ds), dt.date.fromisoformat(end_ds)
    return [(start + dt.timedelta(days=i)).isoformat() for i in range((end - start).days + 1)]


def summarise(reports: dict[str, dict[str, Any]], ui_url: str) -> dict[str, Any]:
    """The check's return value: each day's outcome, what moved and where its report is; the
    days that drifted, most statistics moved first."""
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
    drifted = sorted(
        (ds for ds, day in days.items() if day["outcome"] == DRIFT), key=lambda ds: -len(days[ds]["moved"])
    )
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
                f"{self.monitoring_root.rstrip('/')}/ds={ds}/drift.json", conn_id=self.storage_conn_id
            )
            if not path.exists():
                missing.append(f"{ds} ({path})")
                continue
            reports[ds] = json.loads(path.read_text())
        if missing:
            raise FileNotFoundError(
                f"no drift report for {', '.join(missing)}: was the day scored with its drift check?"
            )
        result = summarise(reports, MlflowRegistryHook(self.mlflow_conn_id).ui_url)
        for ds, day in result["days"].items():
            moved = f": {', '.join(day['moved'])} moved" if day["moved"] else ""
            self.log.info("%s scored by %s: %s%s (%s rows)", ds, day["model"], day["outcome"], moved, day["rows"])
        return result
