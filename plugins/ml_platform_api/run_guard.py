"""The API door's logical-date rule for runs created without the API.

:mod:`ml_platform_api.strict_conf` refuses a trigger whose logical date is ahead at the REST
API (and so the UI's trigger form). ``airflow dags trigger`` and ``airflow dags test`` do not
pass that door: they write the run to the metadata DB themselves. This guard holds the same
rule where every run is written: a manual run whose logical date is beyond now (more than
:data:`~ml_platform_api.strict_conf.MAX_CLOCK_SKEW` ahead) is refused when its session
flushes, with the message the API gives (naming ``logical_date``), and nothing is written.
Scheduled runs (logical date at the start of a past interval) and backfills (Airflow refuses
future dates itself) are left alone.

Installed in every Airflow process of the platform by ``plugins/airflow_local_settings.py``
(Airflow imports that module from the plugins folder on start-up).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import event
from sqlalchemy.orm import Session

from ml_platform_api.strict_conf import future_date_refusal


class FutureLogicalDate(ValueError):
    """A manual run's logical date is ahead of now."""


def refuse_future_manual_runs(session: Session, flush_context: Any, instances: Any) -> None:
    """``before_flush`` listener: raise :class:`FutureLogicalDate` for a new manual run dated ahead."""
    from airflow.models.dagrun import DagRun

    now = dt.datetime.now(dt.UTC)
    for run in session.new:
        if not isinstance(run, DagRun) or run.logical_date is None or run.run_type != "manual":
            continue
        if refusal := future_date_refusal(run.logical_date, now):
            raise FutureLogicalDate(f"dag {run.dag_id}: {refusal}")


def install() -> None:
    """Listen on every SQLAlchemy session of this process (once, however often called)."""
    if not event.contains(Session, "before_flush", refuse_future_manual_runs):
        event.listen(Session, "before_flush", refuse_future_manual_runs)
