"""Register: evaluate a training run's model on the held-out split, register it, gate it.

The candidate is evaluated with Spark on the window's held-out rows (the split training
never saw) with the workflow's metric (``[metric]``: accuracy, higher is better; RMSE,
lower is better), registered as a new version tagged with its workflow, data window, git
revision and Airflow run, and given alias ``challenger``. It becomes ``champion`` only when
it reaches the floor and is not worse than the current champion, evaluated on the same
rows, by more than the tolerance (``[promotion]``, or ``--floor`` / ``--tolerance``;
mlops-stacks' validate -> challenger -> champion flow).

Re-running for the same training run reuses the version it registered instead of adding one.

The candidate's held-out predictions also go through MLflow's own evaluator, logged to the
training run (``holdout_*`` metrics; a classifier's confusion matrix and per-class
precision and recall; sample predictions): what a reviewer reads beside the training
curves (:mod:`spark_jobs.tracking`).

Before the version is registered, its **reference profile** (the training window's declared
statistics and the held-out predictions, :mod:`spark_jobs.monitoring`) is logged to the
training run: every version that can become champion has what its scored days are
checked against for drift.

The steps, in order (``main`` wires them): evaluate, profile, register, compare, tag,
alias, promote, manifest.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import logging
import math
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ml_contract.layout import HOLDOUT_PCT, SPLIT_SEED
from spark_jobs import monitoring, tracking, workflows
from spark_jobs.dataset import filter_holdout_rows
from spark_jobs.inference import evaluate, with_predictions
from spark_jobs.partitions import parse_ds, read_partitions
from spark_jobs.promotion import CHAMPION, LOCK_STALE_AFTER_S, LOCK_TIMEOUT_S, promote_to_champion
from spark_jobs.session import build_spark_session, configure_job_logging
from spark_jobs.storage import read_json, write_json

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from spark_jobs.workflows import Metric, Workflow

log = logging.getLogger(__name__)

CHALLENGER = "challenger"
# Version tags, also read by the registry gate (plugins/) and documented in docs/registry_gate.md.
TAG_VALIDATION = "validation_status"
TAG_REASON = "validation_reason"
TAG_METRIC = "holdout_metric"
TAG_WORKFLOW = "workflow"
# How long mlflow.register_model waits for a new version to become READY.
REGISTRATION_WAIT_S = 300


def holdout_tag(metric_name: str) -> str:
    """The version tag (and run metric) holding the held-out value: ``holdout_accuracy``, ``holdout_rmse``."""
    return f"holdout_{metric_name}"


def _shown(value: float) -> str:
    return str(round(float(value), 4))


def promotion_decision(
    candidate: float, champion: float | None, *, metric: Metric, floor: float, tolerance: float
) -> tuple[bool, str]:
    """Whether the candidate may become champion, and why (logged and tagged).

    ``max`` metrics: ``candidate >= floor`` and ``candidate >= champion - tolerance``;
    ``min`` metrics: ``candidate <= floor`` and ``candidate <= champion + tolerance``. A NaN
    candidate never passes; a NaN champion (it cannot be measured on these rows) is not
    compared with.
    """
    name, higher = metric.name, metric.direction == "max"
    at_least, missed = (">=", "below") if higher else ("<=", "above")
    if math.isnan(candidate):
        return False, f"{name} is nan on the held-out rows: it cannot reach the floor {_shown(floor)}"
    if not (candidate >= floor if higher else candidate <= floor):
        return False, f"{name} {_shown(candidate)} {missed} the floor {_shown(floor)}"
    passes = f"{name} {_shown(candidate)} {at_least} floor {_shown(floor)}"
    if champion is None:
        return True, f"{passes}; no champion yet"
    if math.isnan(champion):
        return True, f"{passes}; champion's {name} is nan on the same rows, not compared"
    if not (candidate >= champion - tolerance if higher else candidate <= champion + tolerance):
        return False, (
            f"{name} {_shown(candidate)} worse than champion's {_shown(champion)} beyond tolerance {_shown(tolerance)}"
        )
    return True, f"{passes} and within {_shown(tolerance)} of champion's {_shown(champion)}"


# -- evaluate ---------------------------------------------------------------------------


def evaluate_model(holdout_df: DataFrame, model_uri: str, workflow: Workflow) -> tuple[float, int]:
    """The workflow's metric of ``model_uri`` on the held-out rows, and how many rows."""
    return evaluate(with_predictions(holdout_df, model_uri, workflow), workflow)


# -- register ---------------------------------------------------------------------------


def find_or_register_version(client, model_name: str, model_uri: str, run_id: str, tags: dict[str, str]):
    """The version already registered from ``run_id`` (a retried task), or a new one, READY.

    ``mlflow.register_model`` creates the registered model if needed and waits until the new
    version is READY (it raises if registration fails or outlasts the wait). A reused
    version that is not READY fails the job; the task's retry looks again.
    """
    import mlflow

    existing = client.search_model_versions(f"name = '{model_name}' and run_id = '{run_id}'")
    if not existing:
        return mlflow.register_model(model_uri, model_name, await_registration_for=REGISTRATION_WAIT_S, tags=tags)
    version = max(existing, key=lambda v: int(v.version))
    log.info("reusing version %s already registered from run %s", version.version, run_id)
    if version.status != "READY":
        raise RuntimeError(
            f"model {model_name} version {version.version}, registered from run {run_id}, is {version.status}; "
            "a retry uses it once READY (delete the version if its registration failed)"
        )
    return version


# -- compare ----------------------------------------------------------------------------


@dataclass
class HoldoutComparison:
    """The promotion rule for one candidate against a champion version, both measured on
    the same held-out rows (each champion evaluated once, whichever step asks)."""

    holdout_df: DataFrame
    workflow: Workflow
    model_name: str
    candidate: str
    candidate_value: float
    floor: float
    tolerance: float
    champion_values: dict[str, float] = field(default_factory=dict)

    @property
    def metric(self) -> Metric:
        return self.workflow.metric

    def champion_value(self, version: str) -> float:
        if version not in self.champion_values:
            value, _ = evaluate_model(self.holdout_df, f"models:/{self.model_name}/{version}", self.workflow)
            self.champion_values[version] = value
            log.info("champion version %s: held-out %s %.4f on the same rows", version, self.metric.name, value)
        return self.champion_values[version]

    def __call__(self, champion_version: str | None) -> tuple[bool, str]:
        """The decision against ``champion_version`` (None: no champion; the candidate itself
        compares with nothing)."""
        champion = None
        if champion_version is not None and champion_version != self.candidate:
            champion = self.champion_value(champion_version)
        return promotion_decision(
            self.candidate_value, champion, metric=self.metric, floor=self.floor, tolerance=self.tolerance
        )


# -- tag --------------------------------------------------------------------------------


def tag_validation(
    client, model_name: str, version: str, metric: Metric, value: float, passed: bool, reason: str
) -> None:
    """The version tags the gate checks: written before the alias can move to the version."""
    client.set_model_version_tag(model_name, version, TAG_METRIC, metric.name)
    client.set_model_version_tag(model_name, version, holdout_tag(metric.name), f"{value:.6f}")
    client.set_model_version_tag(model_name, version, TAG_VALIDATION, "passed" if passed else "failed")
    client.set_model_version_tag(model_name, version, TAG_REASON, reason)


# -- alias ------------------------------------------------------------------------------


def set_challenger(client, model_name: str, version: str) -> None:
    client.set_registered_model_alias(model_name, CHALLENGER, version)


def current_champion(client, model_name: str) -> str | None:
    """The version ``champion`` points to now, or None (read from the registered model: an
    unreachable server raises instead of passing for "no champion")."""
    champion = (client.get_registered_model(model_name).aliases or {}).get(CHAMPION)
    return None if champion is None else str(champion)


# -- promote ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Decision:
    """Where the candidate ended: the rule's verdict, why, whether it holds ``champion``, and
    the champion version it was last compared with (None: no champion)."""

    passed: bool
    reason: str
    promoted: bool
    compared_with: str | None


def promote(
    client,
    args: argparse.Namespace,
    compare: HoldoutComparison,
    evaluated_against: str | None,
    passed: bool,
    reason: str,
) -> Decision:
    """Move ``champion`` to a passed candidate under the promotion lock (``--promote``).

    The champion may have moved since it was evaluated: the rule is applied again, holding
    the lock, to the champion read there (same rows, each champion evaluated once); the
    version's validation tags then follow that decision.
    """
    candidate, compared_with = compare.candidate, evaluated_against
    if not (passed and args.promote):
        return Decision(passed, reason, False, compared_with)
    outcome = promote_to_champion(
        client,
        args.model_name,
        candidate,
        logical_time=args.logical_time,
        run=args.airflow_run_id or None,
        rule=compare,
        lock_timeout_s=args.lock_timeout,
        lock_stale_after_s=args.lock_stale_after,
    )
    if outcome.champion_before not in (evaluated_against, candidate):
        compared_with = outcome.champion_before
        passed, reason = compare(compared_with)
        reason = f"{reason} (champion changed to version {outcome.champion_before} before promotion)"
        tag_validation(client, args.model_name, candidate, compare.metric, compare.candidate_value, passed, reason)
    promoted = outcome.moved or (outcome.refusal is None and outcome.champion_before == candidate)
    if outcome.refusal is not None and passed:
        reason = f"{reason}; {outcome.refusal}"
    return Decision(passed, reason, promoted, compared_with)


# -- manifest ---------------------------------------------------------------------------


def registration_manifest(
    args: argparse.Namespace, run_id: str, compare: HoldoutComparison, holdout_rows: int, decision: Decision
) -> dict:
    """What the DAG reads after the job (``publish_champion``): the version and its verdict."""
    return {
        "model_name": args.model_name,
        "version": compare.candidate,
        "run_id": run_id,
        "workflow": compare.workflow.name,
        "metric": compare.workflow.metric.name,
        "holdout_value": compare.candidate_value,
        "holdout_rows": holdout_rows,
        "champion_value": compare.champion_values.get(decision.compared_with or ""),
        "passed": decision.passed,
        "promoted": decision.promoted,
        "reason": decision.reason,
    }


def _parse_timestamp(value: str) -> dt.datetime:
    try:
        parsed = dt.datetime.fromisoformat(value)
    except ValueError as err:
        raise argparse.ArgumentTypeError(f"expected an ISO-8601 timestamp, got {value!r}") from err
    if parsed.tzinfo is None:
        raise argparse.ArgumentTypeError(f"timestamp {value!r} needs a UTC offset")
    return parsed


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workflow", required=True, help="the workflow (spark_jobs/workflows/<name>.toml)")
    parser.add_argument("--train-manifest", required=True)
    parser.add_argument("--output-manifest", required=True)
    parser.add_argument("--curated-root", required=True)
    parser.add_argument("--start-ds", type=parse_ds, required=True)
    parser.add_argument("--end-ds", type=parse_ds, required=True)
    parser.add_argument("--holdout-pct", type=int, default=HOLDOUT_PCT)
    parser.add_argument("--split-seed", type=int, default=SPLIT_SEED)
    parser.add_argument("--model-name", required=True)
    parser.add_argument(
        "--floor",
        type=float,
        help="the held-out metric a version must reach to become champion (default: the workflow's [promotion] floor)",
    )
    parser.add_argument(
        "--tolerance",
        type=float,
        help="how much worse than the champion's metric on the same rows a new champion may be "
        "(default: the workflow's [promotion] tolerance)",
    )
    parser.add_argument("--promote", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--git-revision", default="unknown")
    parser.add_argument("--airflow-run-id", default="")
    parser.add_argument(
        "--tag", type=tracking.parse_tag, action="append", default=[], help="KEY=VALUE tag of the new version"
    )
    parser.add_argument(
        "--logical-time",
        type=_parse_timestamp,
        required=True,
        help="ISO-8601 logical time of the promoting run: from when as_of answers the new champion, "
        "clamped to the real move time (see spark_jobs/promotion.py)",
    )
    parser.add_argument(
        "--lock-timeout", type=float, default=LOCK_TIMEOUT_S, help="seconds to wait for the promotion lock"
    )
    parser.add_argument(
        "--lock-stale-after",
        type=float,
        default=LOCK_STALE_AFTER_S,
        help="seconds after which a lock's holder is presumed dead",
    )
    args = parser.parse_args(argv)
    try:
        promotion = workflows.load(args.workflow).promotion
    except workflows.WorkflowError as err:
        parser.error(str(err))
    args.floor = promotion.floor if args.floor is None else args.floor
    args.tolerance = promotion.tolerance if args.tolerance is None else args.tolerance
    if not math.isfinite(args.floor):
        parser.error(f"--floor must be a finite number, got {args.floor:g}")
    if not (math.isfinite(args.tolerance) and args.tolerance >= 0):
        parser.error(f"--tolerance must be a finite number >= 0, got {args.tolerance:g}")
    if not 0 < args.lock_stale_after < args.lock_timeout:
        parser.error(
            f"--lock-stale-after ({args.lock_stale_after:g}) must be positive and below --lock-timeout "
            f"({args.lock_timeout:g}), or a retry after a crash waits out the timeout"
        )
    return args


def main(argv: list[str] | None = None) -> None:
    configure_job_logging()
    args = parse_args(sys.argv[1:] if argv is None else argv)
    from mlflow import MlflowClient

    workflow = workflows.load(args.workflow)
    metric = workflow.metric
    spark = build_spark_session(f"register {args.model_name}")
    try:
        trained = read_json(spark, args.train_manifest)
        window_df = read_partitions(spark, args.curated_root, args.start_ds, args.end_ds)
        holdout_df = filter_holdout_rows(window_df, args.holdout_pct, args.split_seed).cache()
        # Cached: the metric and the evaluator's sample read the same predictions.
        predicted_df = with_predictions(holdout_df, trained["model_uri"], workflow).cache()
        value, holdout_rows = evaluate(predicted_df, workflow)
        if holdout_rows == 0:
            raise ValueError(f"no held-out rows for {args.start_ds}..{args.end_ds}")
        log.info("candidate %s: held-out %s %.4f on %d rows", trained["model_uri"], metric.name, value, holdout_rows)

        client = MlflowClient()
        client.log_metric(trained["run_id"], holdout_tag(metric.name), value)
        evaluated = tracking.log_holdout_evaluation(
            predicted_df,
            workflow,
            trained["run_id"],
            curated_root=args.curated_root,
            start_ds=args.start_ds,
            end_ds=args.end_ds,
        )
        profile = monitoring.reference_profile(window_df, predicted_df, workflow)
        monitoring.log_reference(client, trained["run_id"], profile)
        log.info("reference profile of %s logged to run %s", ", ".join(profile.statistics), trained["run_id"])
        predicted_df.unpersist()
        log.info("MLflow evaluation of the held-out rows, logged to run %s: %s", trained["run_id"], evaluated)
        version = find_or_register_version(
            client,
            args.model_name,
            trained["model_uri"],
            trained["run_id"],
            tags={
                TAG_WORKFLOW: workflow.name,
                "data_start_ds": args.start_ds,
                "data_end_ds": args.end_ds,
                "git_revision": args.git_revision,
                "airflow_run_id": args.airflow_run_id,
                # The epoch whose weights this version holds, and why training ended there.
                **{key: str(trained[key]) for key in ("best_epoch", "stop_reason") if key in trained},
                **dict(args.tag),
            },
        )
        compare = HoldoutComparison(
            holdout_df, workflow, args.model_name, str(version.version), value, args.floor, args.tolerance
        )
        evaluated_against = current_champion(client, args.model_name)
        passed, reason = compare(evaluated_against)
        tag_validation(client, args.model_name, compare.candidate, metric, value, passed, reason)
        set_challenger(client, args.model_name, compare.candidate)
        decision = promote(client, args, compare, evaluated_against, passed, reason)
        log.info(
            "registered %s version %s as %s%s: %s",
            args.model_name,
            compare.candidate,
            CHALLENGER,
            f" and {CHAMPION}" if decision.promoted else "",
            decision.reason,
        )
        manifest = registration_manifest(args, trained["run_id"], compare, holdout_rows, decision)
        write_json(spark, args.output_manifest, manifest)
        log.info("registration manifest: %s", json.dumps(manifest))
    finally:
        spark.stop()
