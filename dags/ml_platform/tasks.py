"""Task factories: one per step, so every DAG runs a step the same way.

Computing steps are SparkSubmitOperators (or, with ``ML_SPARK_SUBMIT_TARGET=synapse``,
Azure Synapse Spark batch jobs with the same entry points and arguments) referencing job
code by path (entry point and ``--py-files`` archive), never by import. Their arguments
come from configuration, Airflow's run context, or validated ``params`` (JSON-schema typed
and bounded, checked at trigger time), never from ``dag_run.conf`` directly.
"""

from __future__ import annotations

import logging
from datetime import date, timedelta
from typing import TYPE_CHECKING, Any

import pendulum
from airflow.sdk import DAG, Asset, PokeReturnValue, TaskGroup, XComArg, chain, task
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

from ml_platform.config import DEFAULT_ARGS, PORTABLE_SPARK_CONF, PlatformConfig
from ml_platform.job_arguments import (
    FeedbackArguments,
    IngestArguments,
    RegisterArguments,
    ScoreArguments,
    TrainArguments,
)
from ml_platform.partitions import MACROS, RUN_KEY, RUN_TIME
from ml_platform.workflows import workflow as workflow_info
from ml_registry.drift_check import DriftCheckOperator, LabelCheckOperator
from ml_registry.spark_submit import MlflowSparkSubmitOperator

if TYPE_CHECKING:
    from airflow.sdk import BaseOperator, ObjectStoragePath

log = logging.getLogger(__name__)

REGISTRY_POOL = "ml_registry"
# The alias the register step gives every new version; scored beside the champion with [monitoring] shadow.
CHALLENGER = "challenger"
START_DATE = pendulum.datetime(2026, 1, 1, tz="UTC")
# What the registry gate of every scoring DAG requires of a version: the register step's
# validation passed (docs/security.md: the barrier between registering and running on executors).
REQUIRED_TAGS = {"validation_status": "passed"}
# wait_for_raw_drop looks for the day's drop (in the landing zone, else in the storage root)
# this often (reschedule mode: no worker slot between looks) until ML_RAW_DROP_DEADLINE_HOURS.
RAW_DROP_POKE_INTERVAL = timedelta(minutes=5)
# A writer waiting for another run's writer of the same partition frees its worker slot
# between tries; one still blocked after PARTITION_LOCK_TIMEOUT fails, naming the holder.
PARTITION_LOCK_POKE_INTERVAL = timedelta(seconds=15)
PARTITION_LOCK_TIMEOUT = timedelta(hours=6)


def curated_asset(cfg: PlatformConfig) -> Asset:
    """Updated by every ingest: the curated dataset has a new or replaced partition."""
    return Asset(name=f"{cfg.workflow}_curated", uri=cfg.storage_uri(cfg.curated_root))


def champion_asset(cfg: PlatformConfig) -> Asset:
    """Updated when a register step moves ``champion`` to a new version."""
    return Asset(name=f"{cfg.model_name}.champion", uri=f"mlflow-model://{cfg.model_name}/champion")


def evidence_asset(cfg: PlatformConfig) -> Asset:
    """Updated when a scored day drifted (or, from late labels, fell short of the tolerance):
    evidence for a retraining (``<workflow>_retrain_on_drift``). The event's extra says why."""
    return Asset(
        name=f"{cfg.model_name}.retraining_evidence", uri=f"mlflow-model://{cfg.model_name}/retraining-evidence"
    )


def spark_job(cfg: PlatformConfig, *, task_id: str, job: str, args: list[Any], **kwargs: Any) -> BaseOperator:
    """A task running ``spark_jobs/entrypoints/<job>.py`` with ``args``: a SparkSubmitOperator,
    or a Synapse Spark batch job when ``cfg.submit_target`` is ``synapse``.

    The MLflow connection reaches the job as environment variables (added at execute
    time by the operator), so tracking credentials never appear on the command line.
    """
    name = f"{job}-{{{{ dag.dag_id }}}}-{{{{ run_key(run_id) }}}}"
    # An upstream task's output (XComArg) stays one: it is resolved when the task renders.
    application_args = [a if isinstance(a, XComArg) else str(a) for a in args]
    if cfg.submit_target == "synapse":
        return synapse_job(cfg, task_id=task_id, job=job, name=name, args=application_args, **kwargs)
    return MlflowSparkSubmitOperator(
        task_id=task_id,
        application=cfg.application(job),
        py_files=cfg.jobs_archive,
        conn_id=cfg.spark_conn_id,
        mlflow_conn_id=cfg.mlflow_conn_id,
        pass_mlflow_credentials=cfg.pass_mlflow_credentials,
        conf=cfg.spark_conf(),
        name=name,
        application_args=application_args,
        **kwargs,
    )


def synapse_job(
    cfg: PlatformConfig, *, task_id: str, job: str, name: str, args: list[XComArg | str], **kwargs: Any
) -> BaseOperator:
    """The same job as a Spark batch job on the Synapse pool ``cfg.synapse_pool``.

    The payload names the same entry point, ``--py-files`` archive and arguments as the
    spark-submit task (``ML_JOBS_ROOT``/``ML_JOBS_ARCHIVE`` must then be on the workspace's
    storage, e.g. ``abfss://``). The pool brings its own Python and log settings, so only the
    portable Spark settings travel; no secrets are in the payload (see the operator).
    """
    from ml_registry.synapse import MlflowSynapseSparkBatchOperator

    resources = cfg.synapse_resources
    return MlflowSynapseSparkBatchOperator(
        task_id=task_id,
        azure_synapse_conn_id=cfg.synapse_conn_id,
        spark_pool=cfg.synapse_pool,
        mlflow_conn_id=cfg.mlflow_conn_id,
        payload={
            "name": name,
            "file": cfg.application(job),
            "arguments": args,
            "python_files": [cfg.jobs_archive],
            "configuration": dict(PORTABLE_SPARK_CONF),
            "driver_memory": resources.driver_memory,
            "driver_cores": resources.driver_cores,
            "executor_memory": resources.executor_memory,
            "executor_cores": resources.executor_cores,
            "executor_count": cfg.synapse_executors,
        },
        **kwargs,
    )


def workflow_dag(
    cfg: PlatformConfig, kind: str, *, description: str, doc_md: str | None, schedule: Any, **kwargs: Any
) -> DAG:
    """A DAG of ``cfg``'s workflow: id ``<workflow>_<kind>``, its description prefixed by the
    workflow, the platform's start date, default args and macros, no catch-up; ``kwargs``
    (max_active_runs, params, tags) and ``schedule`` are the DAG's own."""
    return DAG(
        dag_id=f"{cfg.workflow}_{kind}",
        description=f"{cfg.workflow}: {description}",
        doc_md=doc_md,
        schedule=schedule,
        start_date=START_DATE,
        catchup=False,
        default_args=DEFAULT_ARGS,
        user_defined_macros=MACROS,
        **kwargs,
    )


def gate(cfg: PlatformConfig, *, dataset_path: Any = None, **rules: Any) -> BaseOperator:
    """The registry gate of a scoring DAG: resolves the workflow's ``champion`` (or what
    ``rules`` select: ``version``, ``policy``/``as_of``), requires REQUIRED_TAGS, checks the
    version's signature against ``dataset_path`` (a curated partition) when given.

    Its result (``uri``, ``name``, ``version``, ``alias``) is also one XCom per key, so the
    scoring task takes ``gate.output["uri"]``: the dependency is the argument, not a
    template naming the gate's task id."""
    from ml_registry.operators import ModelRegistryGateOperator

    return ModelRegistryGateOperator(
        task_id="gate_model",
        model_name=cfg.model_name,
        alias="champion",
        required_tags=REQUIRED_TAGS,
        dataset_path=dataset_path,
        mlflow_conn_id=cfg.mlflow_conn_id,
        multiple_outputs=True,
        **rules,
    )


def run_dir(cfg: PlatformConfig) -> str:
    return cfg.run_dir("{{ dag.dag_id }}", RUN_KEY)


def storage_path(cfg: PlatformConfig, path: str) -> ObjectStoragePath:
    """A path or URI under the storage root as Airflow object storage, for Airflow tasks
    (Spark jobs use Hadoop's file systems), through ``ML_STORAGE_CONN_ID`` when set."""
    from airflow.sdk import ObjectStoragePath

    return ObjectStoragePath(cfg.object_storage_uri(path), conn_id=cfg.storage_conn_id or None)


def receive_raw_drop(cfg: PlatformConfig, ds: str) -> list[BaseOperator | XComArg]:
    """Wait for the day's drop (:func:`wait_for_raw_drop`): in the landing container with a
    landing zone (``ML_LANDING_CONTAINER``; :func:`ingest` then stages it), else in the storage
    root's raw partition. The wait holds no partition lock: a drop can be hours late.
    """
    return [wait_for_raw_drop(cfg, ds)]


def raw_drop_deadline(ds: str, hours: float) -> pendulum.DateTime:
    """Until when day ``ds``'s raw drop is waited for: ``hours`` after the day ends (UTC)."""
    day = date.fromisoformat(ds)
    return pendulum.datetime(day.year, day.month, day.day, tz="UTC") + timedelta(days=1, hours=hours)


def has_drop_files(partition: Any) -> bool:
    """Whether a raw partition (an ``ObjectStoragePath``, or a ``pathlib.Path``) holds a file
    ingest reads: names starting with ``_`` or ``.`` (a writer's temporary or marker files)
    are not, as for Spark."""
    if not partition.exists():
        return False
    return any(path.is_file() and not path.name.startswith(("_", ".")) for path in partition.iterdir())


def raw_drop_alert(cfg: PlatformConfig):
    """The ``on_skipped_callback`` of :func:`wait_for_raw_drop`: a warning in the task's log,
    then ``ML_RAW_DROP_ALERT`` (``module:callable``, given the context) where one is set."""

    def alert(context: dict[str, Any]) -> None:
        log.warning("ALERT raw drop missed its deadline: %s", context.get("exception") or "no drop")
        if cfg.raw_drop_alert:
            import importlib

            module, _, name = cfg.raw_drop_alert.partition(":")
            getattr(importlib.import_module(module), name)(context)

    return alert


def raw_drop_landed(cfg: PlatformConfig, where: str) -> bool:
    """Whether the day's drop is at ``where``: a blob below that prefix of the landing container
    (with a landing zone), else a file ingest reads in that raw partition of the storage root."""
    if cfg.landing_container:
        from airflow.providers.microsoft.azure.hooks.wasb import WasbHook

        return WasbHook(wasb_conn_id=cfg.landing_conn_id).check_for_prefix(cfg.landing_container, where)
    return has_drop_files(storage_path(cfg, where))


def wait_for_raw_drop(cfg: PlatformConfig, ds: str) -> XComArg:
    """Wait for day ``ds``'s raw drop, in the landing container with a landing zone, else in
    the storage root (:func:`raw_drop_landed`): done when it is there; skipped, with the reason
    and :func:`raw_drop_alert`, once the deadline (``ML_RAW_DROP_DEADLINE_HOURS`` after the day
    ends) has passed without it, so the run's other tasks are skipped too and nothing fails or
    retries. The clock decides only how long to wait, never which day is processed. Reschedule
    mode: no worker slot between looks."""
    hours = cfg.raw_drop_deadline_hours
    where = cfg.landing_prefix(ds) if cfg.landing_container else cfg.raw_path(ds)
    shown = f"wasb://{cfg.landing_container}/" if cfg.landing_container else ""

    @task.sensor(
        task_id="wait_for_raw_drop",
        mode="reschedule",
        poke_interval=RAW_DROP_POKE_INTERVAL.total_seconds(),
        # A backstop only (the deadline ends the wait first); it skips too.
        timeout=(timedelta(hours=hours) + timedelta(days=2)).total_seconds(),
        soft_fail=True,  # (a skip is no failure: it is never retried; a failing look still is)
        on_skipped_callback=raw_drop_alert(cfg),
    )
    def wait(location: str, day: str) -> bool:  # (not "ds": a context key)
        if raw_drop_landed(cfg, location):
            log.info("raw drop for ds=%s is at %s%s", day, shown, location)
            return True
        deadline = raw_drop_deadline(day, hours)
        if pendulum.now("UTC") >= deadline:
            raise AirflowSkipException(
                f"no raw drop for ds={day} at {shown}{location} by its deadline {deadline.isoformat()} "
                f"(ML_RAW_DROP_DEADLINE_HOURS={hours:g} after the day): nothing to process, the run's tasks are skipped"
            )
        log.info("no raw drop for ds=%s at %s%s yet; waiting until %s", day, shown, location, deadline.isoformat())
        return False

    return wait(where, ds)


def raw_drop_file_name(blob_name: str, prefix: str) -> str:
    """Where a landed blob goes below the raw partition: its name without the day's prefix.

    Blob names come from the landing container, which parties outside the platform write
    to, and the name is joined onto the partition as a path. A name with an empty (absolute
    or ``//``), ``.`` or ``..`` segment, a backslash (a separator to Windows tools; Azurite
    itself lists ``a\\..\\b`` as ``a/../b``) or a NUL could land outside the partition, or
    somewhere other than it says: ValueError naming the blob. Names are never percent-
    decoded, so ``%2e%2e`` is a file of that name.
    """
    if not blob_name.startswith(prefix):
        raise ValueError(f"landed blob {blob_name!r} is not under the day's prefix {prefix!r}")
    relative = blob_name[len(prefix) :]
    if "\\" in relative or "\x00" in relative or any(s in ("", ".", "..") for s in relative.split("/")):
        raise ValueError(
            f"landed blob {blob_name!r} is not a plain path below {prefix!r} "
            "(empty, '.' or '..' segment, leading '/', backslash or NUL): rename or remove it"
        )
    return relative


def stage_raw_drop(cfg: PlatformConfig, ds: str):
    """Copy the day's blobs from the landing container into the raw partition of the storage root."""

    @task(task_id="stage_raw_drop", multiple_outputs=False)  # one summary XCom, not one per key
    def stage(prefix: str, raw_uri: str) -> dict[str, Any]:
        """Idempotent: the partition ends up holding exactly the landed files (blob names
        relative to ``prefix``), whatever an earlier try left there."""
        from airflow.providers.microsoft.azure.hooks.wasb import WasbHook

        # get_conn(): the synchronous client (blob_service_client is typed sync or async).
        container = WasbHook(wasb_conn_id=cfg.landing_conn_id).get_conn().get_container_client(cfg.landing_container)
        blobs = [
            blob
            for blob in container.list_blobs(name_starts_with=prefix, include=["metadata"])
            # Folder markers of hierarchical-namespace (ADLS Gen2) accounts are not files.
            if not blob.name.endswith("/") and (blob.metadata or {}).get("hdi_isfolder") != "true"
        ]
        source = f"{cfg.landing_container}/{prefix}"
        if not blobs:
            raise FileNotFoundError(f"no blobs under {source} in connection {cfg.landing_conn_id!r}")
        # Every name is checked before anything is copied: a refused drop leaves the partition as it was.
        names, refused = {}, []
        for blob in blobs:
            try:
                names[blob.name] = raw_drop_file_name(blob.name, prefix)
            except ValueError as error:
                refused.append(str(error))
        if refused:
            raise AirflowFailException(f"refusing the drop under {source}: " + "; ".join(refused))
        target = storage_path(cfg, raw_uri)
        target.mkdir(parents=True, exist_ok=True)
        staged: dict[str, int] = {}
        for blob in blobs:
            relative = names[blob.name]
            destination = target / relative
            destination.parent.mkdir(parents=True, exist_ok=True)
            with destination.open("wb") as out:
                container.download_blob(blob.name).readinto(out)
            staged[relative] = blob.size
        # Files of an earlier, different drop of this day would be ingested with this one.
        root = target.path.rstrip("/")
        stale = [f for f in target.fs.find(root) if f.removeprefix(root).lstrip("/") not in staged]
        for path in stale:
            target.fs.rm(path)
        summary = {"files": len(staged), "bytes": sum(staged.values()), "removed": len(stale)}
        print(
            f"staged {summary['files']} files ({summary['bytes']} bytes) from {source} to {raw_uri}; "
            f"removed {summary['removed']} stale files"
        )
        return {**summary, "source": source, "destination": raw_uri}

    return stage(cfg.landing_prefix(ds), cfg.storage_uri(cfg.raw_path(ds)))


def partition_lock(cfg: PlatformConfig, dataset: str, start_ds: str, end_ds: str, writers: list[BaseOperator]) -> None:
    """Run ``writers`` (in order) holding the locks of ``dataset``'s partitions ``start_ds..end_ds``.

    ``claim_<dataset>`` (a setup, reschedule mode) takes every lock or waits;
    ``release_<dataset>`` (its teardown) runs whether the writers succeed or fail. Call
    inside a DAG; see ``ml_platform.partition_locks`` for why a lock and not a pool.
    """
    from ml_platform.partition_locks import LIVE_RUN_STATES, Holder, lock_names, release, try_claim

    def locks(start: str, end: str) -> list[str]:
        first, last = date.fromisoformat(start), date.fromisoformat(end)
        days = [(first + timedelta(days=n)).isoformat() for n in range((last - first).days + 1)]
        # Per workflow: the mnist and diabetes curated partitions of one day are different objects.
        return lock_names([cfg.dataset_key(dataset)], days)

    def holder(context: dict[str, Any]) -> Holder:
        return Holder(context["dag"].dag_id, context["run_id"], f"claim_{dataset}")

    @task.sensor(
        task_id=f"claim_{dataset}",
        mode="reschedule",
        poke_interval=PARTITION_LOCK_POKE_INTERVAL.total_seconds(),
        timeout=PARTITION_LOCK_TIMEOUT.total_seconds(),
    )
    def claim(start: str, end: str, **context: Any) -> PokeReturnValue:
        ti = context["ti"]

        def is_live(other: Holder) -> bool:
            try:
                return ti.get_dagrun_state(other.dag_id, other.run_id) in LIVE_RUN_STATES
            except Exception:  # unknown run or API error: never break what may be held
                log.warning(
                    "state of %s/%s unknown; treating its lock as held", other.dag_id, other.run_id, exc_info=True
                )
                return True

        lock_dir = storage_path(cfg, cfg.lock_root)
        busy = try_claim(lock_dir, locks(start, end), holder(context), is_live)
        for name, other in busy:
            log.info(
                "waiting for %s/%s, held by %s run %s (delete it if that run is gone)",
                cfg.lock_root,
                name,
                other.dag_id,
                other.run_id,
            )
        return PokeReturnValue(is_done=not busy)

    @task(task_id=f"release_{dataset}")
    def release_locks(start: str, end: str, **context: Any) -> int:
        return release(storage_path(cfg, cfg.lock_root), locks(start, end), holder(context))

    claim_task = claim(start_ds, end_ds)
    release_task = release_locks(start_ds, end_ds)
    chain(claim_task, *writers, release_task.as_teardown(setups=claim_task))  # type: ignore[arg-type]  # takes an XComArg, typed operators only


def ingest(cfg: PlatformConfig, ds: str) -> TaskGroup:
    """Stage the landed drop (with a landing zone) and ingest day ``ds``, holding its
    partition lock: raw, curated and quarantine of a day are written together."""
    with TaskGroup(group_id="ingest_partition", prefix_group_id=False) as group:
        writers = [stage_raw_drop(cfg, ds)] if cfg.landing_container else []
        writers.append(
            spark_job(
                cfg,
                task_id="ingest_raw_drop",
                job="ingest",
                args=IngestArguments(
                    workflow=cfg.workflow,
                    ds=ds,
                    raw_path=cfg.raw_path(ds),
                    curated_root=cfg.curated_root,
                    quarantine_root=cfg.quarantine_root,
                    max_bad_ratio=cfg.max_bad_ratio,
                ).argv(),
                outlets=[curated_asset(cfg)],
            )
        )
        partition_lock(cfg, "curated", ds, ds, writers)
    return group


def train(
    cfg: PlatformConfig,
    *,
    start_ds: str,
    end_ds: str,
    epochs: Any,
    learning_rate: Any,
    batch_size: Any,
    num_ranks: Any,
    backend: Any,
) -> BaseOperator:
    arguments = TrainArguments(
        workflow=cfg.workflow,
        curated_root=cfg.curated_root,
        start_ds=start_ds,
        end_ds=end_ds,
        work_dir=f"{run_dir(cfg)}/train",
        output_manifest=f"{run_dir(cfg)}/train.json",
        experiment_name=cfg.experiment_name,
        epochs=epochs,
        learning_rate=learning_rate,
        batch_size=batch_size,
        num_ranks=num_ranks,
        backend=backend,
        holdout_pct=cfg.training_defaults.holdout_pct,
        split_seed=cfg.training_defaults.split_seed,
        checkpoint_dir=cfg.checkpoint_dir("{{ dag.dag_id }}", RUN_KEY) if cfg.checkpoint_root else None,
        tags=("airflow_dag_id={{ dag.dag_id }}", "airflow_run_id={{ run_id }}"),
    )
    return spark_job(cfg, task_id="train_model", job="train", args=arguments.argv())


def register(
    cfg: PlatformConfig, *, start_ds: str, end_ds: str, promote: Any = True, tags: tuple[str, ...] = ()
) -> BaseOperator:
    """Registration runs in a pool of one slot: two DAGs never register at the same time.
    ``promote``: a bool, or a template rendering to ``--promote`` / ``--no-promote``;
    ``tags``: extra version tags, ``KEY=VALUE`` (templated)."""
    arguments = RegisterArguments(
        workflow=cfg.workflow,
        train_manifest=f"{run_dir(cfg)}/train.json",
        output_manifest=f"{run_dir(cfg)}/register.json",
        curated_root=cfg.curated_root,
        start_ds=start_ds,
        end_ds=end_ds,
        holdout_pct=cfg.training_defaults.holdout_pct,
        split_seed=cfg.training_defaults.split_seed,
        model_name=cfg.model_name,
        git_revision=cfg.git_revision,
        airflow_run_id="{{ run_id }}",
        logical_time=RUN_TIME,
        promote=promote,
        tags=tags,
    )
    return spark_job(cfg, task_id="register_model", job="register", args=arguments.argv(), pool=REGISTRY_POOL)


def publish_champion(cfg: PlatformConfig):
    """Emit the champion Asset event only when this run's register step promoted."""

    @task(task_id="publish_champion", outlets=[champion_asset(cfg)], multiple_outputs=False)
    def publish(manifest_path: str) -> dict:
        import json

        manifest = json.loads(storage_path(cfg, manifest_path).read_text())
        if not manifest["promoted"]:
            raise AirflowSkipException(f"version {manifest['version']} not promoted: {manifest['reason']}")
        return {
            "version": manifest["version"],
            "metric": manifest["metric"],
            "holdout_value": manifest["holdout_value"],
        }

    return publish(cfg.storage_uri(f"{run_dir(cfg)}/register.json"))


def score(
    cfg: PlatformConfig,
    *,
    model_uri: Any,
    start_ds: Any,
    end_ds: Any = None,
    task_id: str = "score_partition",
) -> TaskGroup:
    """Score one partition (``end_ds`` None) or a range with ``model_uri`` (the gate's
    ``output["uri"]``), holding the predictions locks of those days.

    With ``[monitoring] drift`` (the default) the job checks each day it wrote against the
    version's reference profile, then ``check_drift`` reads the reports and ``signal_drift``
    emits the retraining evidence when a day drifted (skipped when none did).
    """
    days = {"ds": start_ds} if end_ds is None else {"start_ds": start_ds, "end_ds": end_ds}
    watch = workflow_info(cfg.workflow).monitoring
    watched = watch.drift
    arguments = ScoreArguments(
        workflow=cfg.workflow,
        model=model_uri,
        input_data=cfg.curated_root,
        scored_data=cfg.predictions_root,
        monitoring_data=cfg.monitoring_root if watched or watch.shadow else None,
        shadow_alias=CHALLENGER if watch.shadow else None,
        **days,
    )
    with TaskGroup(group_id=f"{task_id}_locked", prefix_group_id=False) as group:
        writer = spark_job(cfg, task_id=task_id, job="score", args=arguments.argv())
        partition_lock(cfg, "predictions", start_ds, end_ds or start_ds, [writer])
    if watched:
        check = report_check(cfg, DriftCheckOperator, "check_drift", start_ds, end_ds)
        writer >> check >> signal_evidence(cfg, check.output, task_id="signal_drift", reason="drift")
    return group


def label_feedback(cfg: PlatformConfig, *, start_ds: Any, end_ds: Any) -> list[BaseOperator | XComArg]:
    """The late labels of ``start_ds..end_ds`` against what was scored (a Spark job), the
    reports read (``check_labels``) and the evidence signalled when a day degraded."""
    arguments = FeedbackArguments(
        workflow=cfg.workflow,
        labels_data=cfg.labels_root,
        scored_data=cfg.predictions_root,
        monitoring_data=cfg.monitoring_root,
        start_ds=start_ds,
        end_ds=end_ds,
    )
    job = spark_job(cfg, task_id="realised_metric", job="feedback", args=arguments.argv())
    check = report_check(cfg, LabelCheckOperator, "check_labels", start_ds, end_ds)
    signal = signal_evidence(cfg, check.output, task_id="signal_degradation", reason="realised_metric")
    return [job, check, signal]


def report_check(
    cfg: PlatformConfig, kind: type[DriftCheckOperator], task_id: str, start_ds: Any, end_ds: Any
) -> DriftCheckOperator:
    """The task reading the reports a job wrote under the workflow's monitoring root for
    ``start_ds..end_ds`` (drift: the score job's; labels: the feedback job's)."""
    return kind(
        task_id=task_id,
        monitoring_root=cfg.object_storage_uri(cfg.monitoring_root),
        start_ds=start_ds,
        end_ds=end_ds,
        storage_conn_id=cfg.storage_conn_id or None,
        mlflow_conn_id=cfg.mlflow_conn_id,
    )


def signal_evidence(cfg: PlatformConfig, check: Any, *, task_id: str, reason: str) -> XComArg:
    """The retraining evidence Asset event when a checked day was flagged (the check's
    ``drifted`` days: drift, or a degraded realised metric); skipped otherwise."""

    @task(task_id=task_id, outlets=[evidence_asset(cfg)], multiple_outputs=False)
    def signal(result: dict, **context: Any) -> dict:
        flagged = result.get("drifted") or []
        if not flagged:
            checked = ", ".join(result.get("days", {})) or "no day"
            raise AirflowSkipException(f"nothing flagged ({reason}) on {checked}: no evidence for a retraining")
        days = result["days"]
        evidence = {
            "reason": reason,
            "days": sorted(flagged),
            "moved": {ds: days[ds]["moved"] for ds in flagged},
            "model": days[flagged[0]]["model"],
        }
        context["outlet_events"][evidence_asset(cfg)].extra = evidence
        return evidence

    return signal(check)


# A day as a run parameter: JSON schema's date, the form's date picker, YYYY-MM-DD only.
DATE_PARAM: dict[str, Any] = {"type": "string", "format": "date", "pattern": r"^\d{4}-\d{2}-\d{2}$"}
MAX_RANGE_DAYS = 366


@task(task_id="check_range")
def check_range(start_ds: str, end_ds: str) -> int:
    """Cross-field rule JSON schema cannot express: a forward range of bounded length."""
    days = (date.fromisoformat(end_ds) - date.fromisoformat(start_ds)).days + 1
    if not 1 <= days <= MAX_RANGE_DAYS:
        raise AirflowFailException(
            f"end_ds {end_ds} must be on or after start_ds {start_ds}, at most {MAX_RANGE_DAYS} days"
        )
    return days


@task(task_id="check_conf")
def check_conf(**context: Any) -> None:
    """Refuse run conf keys the DAG does not declare as params, before any job starts.

    Airflow validates the declared params' JSON schemas when a run is created but accepts
    undeclared keys; the API server refuses those too (plugins/ml_platform_api), and this
    task covers every other way a run can be created (CLI, TriggerDagRunOperator).
    """
    declared = set(context["dag"].params.keys())
    unknown = sorted(set(context["dag_run"].conf or {}) - declared)
    if unknown:
        raise AirflowFailException(
            f"unknown parameter(s) {unknown} for {context['dag'].dag_id}; allowed: {sorted(declared)}"
        )
