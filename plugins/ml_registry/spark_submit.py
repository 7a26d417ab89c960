"""SparkSubmitOperator for the ML jobs: the MLflow connection as environment, no orphan
processes when the task is killed, and never two copies of one task's job."""

from __future__ import annotations

import socket
import time
from typing import TYPE_CHECKING, Any

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import BaseHook
from airflow.sdk.exceptions import AirflowFailException, AirflowNotFoundException

from ml_contract.environment import MLFLOW_CREDENTIAL_VARS
from ml_contract.exit_codes import EXIT_NOT_RETRYABLE
from ml_registry.job_processes import (
    attempts_of,
    job_env,
    job_key,
    job_processes,
    terminate_process_tree,
    terminate_processes,
)

if TYPE_CHECKING:
    from airflow.sdk.definitions.context import Context

__all__ = ["MLFLOW_CREDENTIAL_VARS", "MlflowSparkSubmitOperator", "terminate_process_tree"]


# Task state (kept across a task's tries) of where the last attempt submitted its job.
SUBMITTED_ON_KEY = "ml_spark_job_host"
# The whole of on_kill's clean-up: Airflow's task supervisor SIGKILLs the task process 5 s
# after its SIGTERM (``ActivitySubprocess.kill``'s ``escalation_delay``); 1 s is left for
# the provider's own on_kill.
ON_KILL_BUDGET_S = 4.0


class MlflowSparkSubmitOperator(SparkSubmitOperator):
    """Submit a Spark application that talks to MLflow.

    Behaves like :class:`SparkSubmitOperator`, with these differences:

    - At execute time it reads the MLflow connection and adds ``MLFLOW_TRACKING_URI`` (and
      the basic-auth or token credentials, when the connection has them) to the spark-submit
      process environment. Doing it after templates are rendered keeps credentials out of the
      command line, the task log and the rendered-template view. On YARN and Kubernetes
      masters the provider turns ``env_vars`` into ``--conf spark.yarn.appMasterEnv.*`` /
      ``spark.kubernetes.driverEnv.*`` arguments, i.e. onto the command line: there a
      connection with credentials is refused (give the driver a cluster secret and set
      ``pass_mlflow_credentials=False``, which passes the tracking URI only).
    - Every process the job starts on this machine carries the job's identity (task
      instance and try number, see :mod:`ml_registry.job_processes`). Killing the task
      terminates all of them, SIGTERM then, after ``kill_grace_period``, SIGKILL: spark-submit,
      the driver, pyspark workers, Horovod's ranks, also those that moved to a session of
      their own. In cluster deploy modes the provider also kills the application through
      the cluster, unchanged.
    - Before it submits, a retry stops whatever an earlier attempt of the same task left
      running on this machine (its worker was SIGKILLed, so ``on_kill`` never ran): never
      two copies of one task's job. On Kubernetes in cluster deploy mode the provider's
      ``durable`` mode re-attaches to a driver that is still running instead.
    - A standalone master in cluster deploy mode is refused before anything is submitted:
      there the provider passes no environment to the driver at all (the job's identity and
      MLflow URI travel that way), and Spark's standalone master runs no Python application
      in cluster deploy mode. Client deploy mode (the default) works on a standalone master.
    - A job that exits with :data:`ml_contract.exit_codes.EXIT_NOT_RETRYABLE` (its own
      arguments are at fault: a training that diverged with no usable epoch) fails the task
      with :class:`AirflowFailException`, without retries; every other failure retries as usual.

    :param mlflow_conn_id: Airflow connection of the MLflow tracking server.
    :param pass_mlflow_credentials: Pass the connection's login/password/token to the job.
        ``False`` passes only ``MLFLOW_TRACKING_URI``; the job then needs its credentials
        from elsewhere (a Kubernetes secret, the cluster's credential store).
    :param kill_grace_period: Seconds between SIGTERM and SIGKILL when the task is killed.
        Airflow's task supervisor escalates to SIGKILL on the task itself after 5 s, so the
        whole clean-up fits in :data:`ON_KILL_BUDGET_S`: where finding the job's processes
        took long (a loaded machine), the SIGKILL comes sooner.
    :param conn_id: the Spark connection, as for :class:`SparkSubmitOperator`.
    :param kwargs: everything :class:`SparkSubmitOperator` takes.
    """

    def __init__(
        self,
        *,
        mlflow_conn_id: str = "mlflow_default",
        pass_mlflow_credentials: bool = True,
        kill_grace_period: float = 3.0,
        conn_id: str = "spark_default",
        deploy_mode: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(conn_id=conn_id, deploy_mode=deploy_mode, **kwargs)
        self.spark_deploy_mode = deploy_mode
        self.mlflow_conn_id = mlflow_conn_id
        self.pass_mlflow_credentials = pass_mlflow_credentials
        self.kill_grace_period = kill_grace_period
        self.spark_conn_id = conn_id
        self.job_key: str | None = None
        self.attempt: int | None = None

    def execute(self, context: Context) -> None:
        if standalone_cluster_mode(self.spark_conn_id, self.spark_deploy_mode):
            raise AirflowFailException(
                f"Spark connection {self.spark_conn_id!r} is a standalone master in cluster deploy mode: "
                "the Spark provider passes no environment variables to spark-submit there (this "
                "operator hands the job its identity and MLflow URI that way), and Spark's standalone "
                "master runs no Python application in cluster deploy mode. Use client deploy mode "
                "(the default) on a standalone master."
            )
        ti = context["ti"]
        self.job_key = job_key(ti.dag_id, ti.task_id, ti.run_id, ti.map_index)
        self.attempt = ti.try_number
        self.stop_earlier_attempts(context)
        self.env_vars = {**(self.env_vars or {}), **self.mlflow_env(), **job_env(self.job_key, self.attempt)}
        try:
            return super().execute(context)
        except Exception as err:
            submitted = getattr(self._hook, "_submit_sp", None)
            if submitted is None or submitted.returncode != EXIT_NOT_RETRYABLE:
                raise
            raise AirflowFailException(
                f"the job exited with status {EXIT_NOT_RETRYABLE}: its error, in the log above, would "
                "recur with the same arguments, so the task fails without retrying"
            ) from err

    def stop_earlier_attempts(self, context: Context) -> None:
        """Stop what earlier attempts of this task left running here; warn when the last
        one submitted from another machine, where this attempt cannot look."""
        store = context.get("task_state_store")
        here = socket.gethostname()
        if store is not None:
            earlier = store.get(SUBMITTED_ON_KEY)
            if isinstance(earlier, dict) and earlier.get("host") not in (None, here):
                self.log.warning(
                    "Attempt %s of this task submitted its job on %s, not here (%s): this attempt cannot "
                    "look for what it left there (a lost attempt's job stops itself once its task is gone).",
                    earlier.get("attempt"),
                    earlier.get("host"),
                    here,
                )
            store.set(SUBMITTED_ON_KEY, {"host": here, "attempt": self.attempt})
        assert self.job_key is not None  # execute() sets it before it calls this
        left = job_processes(self.job_key)
        if not left:
            return
        self.log.warning(
            "Attempt(s) %s of this task left %d processes of its job running (the worker was lost "
            "before it could stop them); stopping them before this attempt submits.",
            ", ".join(attempts_of(left)),
            len(left),
        )
        terminate_processes(left, grace_period=self.kill_grace_period, log=self.log, what="the earlier attempt's job")

    def mlflow_env(self) -> dict[str, str]:
        """The MLflow variables for the job; credentials are masked in task logs, and refused
        where environment variables would reach the spark-submit command line."""
        from airflow.sdk.log import mask_secret

        from ml_registry.hooks import MlflowRegistryHook

        env = MlflowRegistryHook(mlflow_conn_id=self.mlflow_conn_id).client_env()
        # Without a name: a named value is masked only while Airflow's
        # [core] hide_sensitive_var_conn_fields is on, the setting that also decides whether
        # Airflow masks a token in the connection's extra. The job gets these values whatever
        # that setting says.
        for name in ("MLFLOW_TRACKING_PASSWORD", "MLFLOW_TRACKING_TOKEN"):
            if name in env:
                mask_secret(env[name])
        if not self.pass_mlflow_credentials:
            env = {k: v for k, v in env.items() if k not in MLFLOW_CREDENTIAL_VARS}
        credentials = sorted(set(env) & set(MLFLOW_CREDENTIAL_VARS))
        if credentials and env_vars_reach_command_line(self.spark_conn_id):
            raise AirflowFailException(
                f"MLflow connection {self.mlflow_conn_id!r} has credentials ({', '.join(credentials)}), "
                "but on a YARN or Kubernetes master spark-submit passes environment variables as "
                "--conf spark.yarn.appMasterEnv.* / spark.kubernetes.driverEnv.* on its command line, "
                "visible to every user of this machine. Give the driver the credentials through a "
                "cluster secret (Kubernetes: spark.kubernetes.driver.secretKeyRef.MLFLOW_TRACKING_TOKEN="
                "<secret>:<key>; YARN: spark.yarn.appMasterEnv.* in a properties_file only the "
                "submitting user can read) and set pass_mlflow_credentials=False to pass only the "
                "tracking URI. See docs/security.md."
            )
        return env

    def on_kill(self) -> None:
        # Done before Airflow's supervisor SIGKILLs this task process, 5 s after its SIGTERM,
        # however long finding the job's processes took: past the deadline, the SIGKILL
        # comes sooner than the grace period.
        deadline = time.monotonic() + ON_KILL_BUDGET_S
        if self.job_key is not None:
            terminate_processes(
                job_processes(self.job_key, self.attempt),
                grace_period=self.kill_grace_period,
                log=self.log,
                what=f"spark-submit of {self.job_key} (attempt {self.attempt})",
                deadline=deadline,
            )
        # Locally there is nothing left for the provider to kill; it still runs the
        # post-submit commands and, in cluster modes, kills the application on the cluster.
        super().on_kill()


def spark_master(spark_conn_id: str) -> str | None:
    """The master URL spark-submit gets for this connection, built as the Spark provider
    builds it; ``None`` when the connection does not exist (the provider then uses YARN)."""
    try:
        conn = BaseHook.get_connection(spark_conn_id)
    except AirflowNotFoundException:
        return None
    if conn.conn_type == "spark" and conn.host and ("://" in conn.host or not conn.port):
        master = conn.host  # a UI-made connection: the host holds the whole master URL
    else:
        master = f"{conn.conn_type}://{conn.host or ''}"
    return f"{master}:{conn.port}" if conn.port else master


def env_vars_reach_command_line(spark_conn_id: str) -> bool:
    """Whether spark-submit puts ``env_vars`` on its command line for this connection: on a
    YARN or Kubernetes master (and on YARN when the connection does not exist)."""
    master = spark_master(spark_conn_id)
    return master is None or "yarn" in master or "k8s" in master


def standalone_cluster_mode(spark_conn_id: str, deploy_mode: str | None = None) -> bool:
    """Whether spark-submit would run in cluster deploy mode on a master that is neither YARN
    nor Kubernetes (a standalone master; Spark refuses a local one): there the provider
    refuses ``env_vars``. The deploy mode is the operator's ``deploy_mode``, else the
    connection's ``deploy-mode`` extra, as the provider decides."""
    if env_vars_reach_command_line(spark_conn_id):
        return False
    if not deploy_mode:
        deploy_mode = BaseHook.get_connection(spark_conn_id).extra_dejson.get("deploy-mode")
    return deploy_mode == "cluster"
