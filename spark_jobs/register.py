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
import contextlib
import datetime as dt
import json
import logging
import os
import socket
import sys
import time
import uuid

from spark_jobs.dataset import filter_holdout_rows
from spark_jobs.inference import accuracy, with_predictions
from spark_jobs.partitions import parse_ds, read_partitions
from spark_jobs.session import build_spark_session, configure_job_logging
from spark_jobs.storage import read_json, write_json

log = logging.getLogger(__name__)

CHALLENGER, CHAMPION = "challenger", "champion"
# Version tags, also read by the registry gate (plugins/) and the as_of policy.
TAG_VALIDATION = "validation_status"
TAG_ACCURACY = "holdout_accuracy"
TAG_PROMOTED_AT = "champion_promoted_at"
# Registered-model tag with the alias's moves, read by the gate's ``as_of`` policy
# (plugins/ml_registry/alias_history.py): a JSON list, oldest first, of
# {"version": "3", "since": "<ISO-8601 UTC>"}.
CHAMPION_HISTORY_TAG = f"{CHAMPION}_history"
# A registered model of this name exists while a job moves ``champion`` (promotion_lock).
PROMOTION_LOCK_SUFFIX = ".promotion-lock"


def promotion_decision(
    candidate_acc: float, champion_acc: float | None, *, min_accuracy: float, tolerance: float
) -> tuple[bool, str]:
    """Whether the candidate may become champion, and why (logged and tagged)."""
    if candidate_acc < min_accuracy:
        return False, f"accuracy {candidate_acc:.4f} below the floor {min_accuracy:.4f}"
    if champion_acc is not None and candidate_acc < champion_acc - tolerance:
        return False, (
            f"accuracy {candidate_acc:.4f} worse than champion's {champion_acc:.4f} "
            f"beyond tolerance {tolerance:.4f}"
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


def appended_history(history_json: str | None, version: str, since: dt.datetime) -> str:
    """The champion history with ``version`` promoted at ``since``.

    Unchanged when ``version`` already holds the alias (a retried task must not move the
    promotion time). A promotion dated before the latest entry (an on-demand run with an
    old logical date) is recorded at the latest entry's time, so the history never goes
    back in time and ``as_of`` stays unambiguous.
    """
    history = json.loads(history_json) if history_json else []
    if history and str(history[-1]["version"]) == str(version):
        return json.dumps(history)
    since = since.astimezone(dt.timezone.utc)
    if history:
        since = max(since, dt.datetime.fromisoformat(history[-1]["since"]))
    return json.dumps([*history, {"version": str(version), "since": since.isoformat()}])


@contextlib.contextmanager
def promotion_lock(client, model_name: str, *, timeout_s: float = 600, stale_after_s: float = 900, poll_s: float = 1.0):
    """Hold the model's promotion lock: one job at a time moves ``champion``.

    Moving the alias and appending to the history tag is a read-modify-write that MLflow
    cannot do atomically; two registrations at once (two deployments, a manual run, a
    pool misconfigured) would lose one history entry. Creating a registered model is
    atomic in the registry's database (its name is unique), so the job that creates
    ``<model>.promotion-lock`` holds the lock, and deletes it when done. A lock older than
    ``stale_after_s`` (its holder died) is broken; waiting longer than ``timeout_s`` fails.
    """
    from mlflow.exceptions import MlflowException

    lock_name = f"{model_name}{PROMOTION_LOCK_SUFFIX}"
    holder = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            client.create_registered_model(
                lock_name, tags={"holder": holder}, description=f"promotion lock of {model_name}, held by {holder}"
            )
            break
        except MlflowException as err:
            if err.error_code != "RESOURCE_ALREADY_EXISTS":
                raise
        try:
            held = client.get_registered_model(lock_name)
        except MlflowException:
            continue  # released meanwhile: try again at once
        if held.tags.get("holder") == holder:
            break  # our create went through but its reply was lost, and the client retried it
        age_s = time.time() - held.creation_timestamp / 1000
        if age_s > stale_after_s:
            log.warning("breaking the promotion lock of %s held by %s for %.0f s", model_name, held.tags.get("holder"), age_s)
            with contextlib.suppress(MlflowException):
                client.delete_registered_model(lock_name)
            continue
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"promotion lock {lock_name!r} still held by {held.tags.get('holder')} after {timeout_s:.0f} s; "
                f"delete that registered model if its holder is gone"
            )
        log.info("waiting for the promotion lock of %s (held by %s)", model_name, held.tags.get("holder"))
        time.sleep(poll_s)
    try:
        yield
    finally:
        client.delete_registered_model(lock_name)


def superseded_by(history_json: str | None, version: str, champion_now: str | None) -> str | None:
    """Why ``version`` must not become champion again, or ``None``.

    A version that held ``champion`` before (it is in the history) and no longer holds it
    was replaced or rolled back on purpose: a retried (or re-run) registration of its
    training run must not move the alias back to it. Promoting the current champion again
    is a no-op, and a version never promoted is not affected.
    """
    history = json.loads(history_json) if history_json else []
    if str(version) == str(champion_now) or all(str(entry["version"]) != str(version) for entry in history):
        return None
    return f"version {version} was champion before and no longer is (champion now: {champion_now or 'none'}); not moved back"


def promote_to_champion(client, model_name: str, version: str, promoted_at: dt.datetime) -> str | None:
    """Move ``champion``, then record the move in the model's promotion history, under
    the model's promotion lock so that concurrent promotions do not lose an entry.
    Returns why the alias was not moved (``None`` when it was, or already pointed there).

    The alias moves first: if the tag write fails, the retried task records the move a
    little late rather than a promotion that never happened being on record.
    """
    with promotion_lock(client, model_name):
        model = client.get_registered_model(model_name)
        history_json = model.tags.get(CHAMPION_HISTORY_TAG)
        champion_now = model.aliases.get(CHAMPION)
        if refusal := superseded_by(history_json, version, None if champion_now is None else str(champion_now)):
            log.warning("%s %s", model_name, refusal)
            return refusal
        client.set_registered_model_alias(model_name, CHAMPION, version)
        client.set_registered_model_tag(
            model_name, CHAMPION_HISTORY_TAG, appended_history(history_json, version, promoted_at)
        )
    client.set_model_version_tag(model_name, version, TAG_PROMOTED_AT, promoted_at.isoformat())
    return None


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
        "--promoted-at",
        type=_parse_timestamp,
        required=True,
        help="ISO-8601 time the promotion takes effect for as_of look-ups (the run's logical date)",
    )
    return parser.parse_args(argv)


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
        champion = current_champion(client, args.model_name)
        champion_acc = None
        if champion is not None and champion.run_id != trained["run_id"]:
            champion_acc, _ = accuracy(with_predictions(holdout_df, f"models:/{args.model_name}/{champion.version}"))
            log.info("champion version %s: held-out accuracy %.4f on the same rows", champion.version, champion_acc)
        passed, reason = promotion_decision(
            candidate_acc, champion_acc, min_accuracy=args.min_accuracy, tolerance=args.champion_tolerance
        )
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
        client.set_model_version_tag(args.model_name, version.version, TAG_ACCURACY, f"{candidate_acc:.6f}")
        client.set_model_version_tag(
            args.model_name, version.version, TAG_VALIDATION, "passed" if passed else "failed"
        )
        client.set_model_version_tag(args.model_name, version.version, "validation_reason", reason)
        client.set_registered_model_alias(args.model_name, CHALLENGER, version.version)
        promoted = passed and args.promote
        if promoted and (refusal := promote_to_champion(client, args.model_name, str(version.version), args.promoted_at)):
            promoted, reason = False, f"{reason}; {refusal}"
        log.info(
            "registered %s version %s as %s%s: %s",
            args.model_name,
            version.version,
            CHALLENGER,
            f" and {CHAMPION}" if promoted else "",
            reason,
        )
        manifest = {
            "model_name": args.model_name,
            "version": str(version.version),
            "run_id": trained["run_id"],
            "holdout_accuracy": candidate_acc,
            "holdout_rows": holdout_rows,
            "champion_accuracy": champion_acc,
            "passed": passed,
            "promoted": promoted,
            "reason": reason,
        }
        write_json(spark, args.output_manifest, manifest)
        log.info("registration manifest: %s", json.dumps(manifest))
    finally:
        spark.stop()
