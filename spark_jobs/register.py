"""Register: evaluate a training run's model on the held-out split, register it, gate it.

The candidate is evaluated with Spark on the window's held-out rows (the split training
never saw), registered as a new version tagged with its data window, git revision and
Airflow run, and given alias ``challenger``. It becomes ``champion`` only when it reaches
the accuracy floor and is not worse than the current champion, evaluated on the same rows,
by more than the tolerance (mlops-stacks' validate -> challenger -> champion flow).

Re-running for the same training run reuses the version it registered instead of adding one.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import logging
import sys
import time

from spark_jobs.dataset import filter_holdout_rows
from spark_jobs.inference import accuracy, with_predictions
from spark_jobs.partitions import parse_ds, read_partitions
from spark_jobs.promotion import CHAMPION, LOCK_STALE_AFTER_S, LOCK_TIMEOUT_S, promote_to_champion
from spark_jobs.session import build_spark_session, configure_job_logging
from spark_jobs.storage import read_json, write_json

log = logging.getLogger(__name__)

CHALLENGER = "challenger"
# Version tags, also read by the registry gate (plugins/).
TAG_VALIDATION = "validation_status"
TAG_ACCURACY = "holdout_accuracy"


def promotion_decision(
    candidate_acc: float, champion_acc: float | None, *, min_accuracy: float, tolerance: float
) -> tuple[bool, str]:
    """Whether the candidate may become champion, and why (logged and tagged)."""
    if candidate_acc < min_accuracy:
        return False, f"accuracy {candidate_acc:.4f} below the floor {min_accuracy:.4f}"
    if champion_acc is not None and candidate_acc < champion_acc - tolerance:
        return False, (
            f"accuracy {candidate_acc:.4f} worse than champion's {champion_acc:.4f} beyond tolerance {tolerance:.4f}"
        )
    if champion_acc is None:
        return True, f"accuracy {candidate_acc:.4f} >= floor {min_accuracy:.4f}; no champion yet"
    return True, (
        f"accuracy {candidate_acc:.4f} >= floor {min_accuracy:.4f} and within {tolerance:.4f} "
        f"of champion's {champion_acc:.4f}"
    )


def find_or_register_version(client, model_name: str, model_uri: str, run_id: str, tags: dict[str, str]):
    """The version already registered from ``run_id`` (a retried task), or a new one, READY."""
    import mlflow
    from mlflow.exceptions import MlflowException

    try:
        client.get_registered_model(model_name)
    except MlflowException:
        try:
            client.create_registered_model(model_name)
        except MlflowException as err:  # created by a concurrent registration meanwhile
            if err.error_code != "RESOURCE_ALREADY_EXISTS":
                raise
    existing = client.search_model_versions(f"name = '{model_name}' and run_id = '{run_id}'")
    if existing:
        version = max(existing, key=lambda v: int(v.version))
        log.info("reusing version %s already registered from run %s", version.version, run_id)
    else:
        version = mlflow.register_model(model_uri, model_name, tags=tags)
    deadline = time.monotonic() + 300
    while version.status != "READY":
        if version.status == "FAILED_REGISTRATION" or time.monotonic() > deadline:
            raise RuntimeError(f"model {model_name} version {version.version} is {version.status}")
        time.sleep(1)
        version = client.get_model_version(model_name, version.version)
    return version


def tag_validation(client, model_name: str, version: str, candidate_acc: float, passed: bool, reason: str) -> None:
    """The version tags the gate checks: written before the alias can move to the version."""
    client.set_model_version_tag(model_name, version, TAG_ACCURACY, f"{candidate_acc:.6f}")
    client.set_model_version_tag(model_name, version, TAG_VALIDATION, "passed" if passed else "failed")
    client.set_model_version_tag(model_name, version, "validation_reason", reason)


def current_champion(client, model_name: str):
    from mlflow.exceptions import MlflowException

    try:
        return client.get_model_version_by_alias(model_name, CHAMPION)
    except MlflowException:
        return None


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
    parser.add_argument("--train-manifest", required=True)
    parser.add_argument("--output-manifest", required=True)
    parser.add_argument("--curated-root", required=True)
    parser.add_argument("--start-ds", type=parse_ds, required=True)
    parser.add_argument("--end-ds", type=parse_ds, required=True)
    parser.add_argument("--holdout-pct", type=int, default=20)
    parser.add_argument("--split-seed", type=int, default=7)
    parser.add_argument("--model-name", required=True)
    parser.add_argument("--min-accuracy", type=float, default=0.93)
    parser.add_argument("--champion-tolerance", type=float, default=0.01)
    parser.add_argument("--promote", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--git-revision", default="unknown")
    parser.add_argument("--airflow-run-id", default="")
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

    spark = build_spark_session(f"register {args.model_name}")
    try:
        trained = read_json(spark, args.train_manifest)
        holdout_df = filter_holdout_rows(
            read_partitions(spark, args.curated_root, args.start_ds, args.end_ds),
            args.holdout_pct,
            args.split_seed,
        ).cache()
        candidate_acc, holdout_rows = accuracy(with_predictions(holdout_df, trained["model_uri"]))
        if holdout_rows == 0:
            raise ValueError(f"no held-out rows for {args.start_ds}..{args.end_ds}")
        log.info("candidate %s: held-out accuracy %.4f on %d rows", trained["model_uri"], candidate_acc, holdout_rows)

        client = MlflowClient()
        client.log_metric(trained["run_id"], TAG_ACCURACY, candidate_acc)
        version = find_or_register_version(
            client,
            args.model_name,
            trained["model_uri"],
            trained["run_id"],
            tags={
                "data_start_ds": args.start_ds,
                "data_end_ds": args.end_ds,
                "git_revision": args.git_revision,
                "airflow_run_id": args.airflow_run_id,
            },
        )
        candidate = str(version.version)
        champion_accuracy: dict[str, float] = {}

        def decide(champion_version: str | None) -> tuple[bool, str]:
            """The promotion rule against ``champion_version``, evaluated on the same held-out rows."""
            champion_acc = None
            if champion_version is not None and champion_version != candidate:
                if champion_version not in champion_accuracy:
                    champion_accuracy[champion_version], _ = accuracy(
                        with_predictions(holdout_df, f"models:/{args.model_name}/{champion_version}")
                    )
                    log.info(
                        "champion version %s: held-out accuracy %.4f on the same rows",
                        champion_version,
                        champion_accuracy[champion_version],
                    )
                champion_acc = champion_accuracy[champion_version]
            return promotion_decision(
                candidate_acc, champion_acc, min_accuracy=args.min_accuracy, tolerance=args.champion_tolerance
            )

        champion = current_champion(client, args.model_name)
        evaluated_against = None if champion is None else str(champion.version)
        compared_with = evaluated_against
        passed, reason = decide(compared_with)
        tag_validation(client, args.model_name, candidate, candidate_acc, passed, reason)
        client.set_registered_model_alias(args.model_name, CHALLENGER, candidate)
        promoted = False
        if passed and args.promote:
            # The champion may have moved since it was evaluated: the rule is applied again,
            # holding the lock, to the champion read there (same rows, cached per version).
            outcome = promote_to_champion(
                client,
                args.model_name,
                candidate,
                logical_time=args.logical_time,
                run=args.airflow_run_id or None,
                rule=decide,
                lock_timeout_s=args.lock_timeout,
                lock_stale_after_s=args.lock_stale_after,
            )
            if outcome.champion_before not in (evaluated_against, candidate):
                compared_with = outcome.champion_before
                passed, reason = decide(compared_with)
                reason = f"{reason} (champion changed to version {outcome.champion_before} before promotion)"
                tag_validation(client, args.model_name, candidate, candidate_acc, passed, reason)
            promoted = outcome.moved or (outcome.refusal is None and outcome.champion_before == candidate)
            if outcome.refusal is not None and passed:
                reason = f"{reason}; {outcome.refusal}"
        log.info(
            "registered %s version %s as %s%s: %s",
            args.model_name,
            candidate,
            CHALLENGER,
            f" and {CHAMPION}" if promoted else "",
            reason,
        )
        manifest = {
            "model_name": args.model_name,
            "version": candidate,
            "run_id": trained["run_id"],
            "holdout_accuracy": candidate_acc,
            "holdout_rows": holdout_rows,
            "champion_accuracy": champion_accuracy.get(compared_with or ""),
            "passed": passed,
            "promoted": promoted,
            "reason": reason,
        }
        write_json(spark, args.output_manifest, manifest)
        log.info("registration manifest: %s", json.dumps(manifest))
    finally:
        spark.stop()
