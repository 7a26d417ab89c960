"""SparkSubmitOperator for the ML jobs: the MLflow connection as environment, and no
orphan processes when the task is killed."""

from __future__ import annotations

import functools
import os
import signal
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk.exceptions import AirflowFailException

if TYPE_CHECKING:
    import logging

    import psutil
    from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

# What an MLflow client authenticates with; the tracking URI alone is not a secret.
MLFLOW_CREDENTIAL_VARS = ("MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD", "MLFLOW_TRACKING_TOKEN")


class MlflowSparkSubmitOperator(SparkSubmitOperator):
    """Submit a Spark application that talks to MLflow.

    Behaves like :class:`SparkSubmitOperator`, with two differences:

    - At execute time it reads the MLflow connection and adds ``MLFLOW_TRACKING_URI`` (and
      the basic-auth or token credentials, when the connection has them) to the spark-submit
      process environment. Doing it after templates are rendered keeps credentials out of the
      command line, the task log and the rendered-template view. On YARN and Kubernetes
      masters the provider turns ``env_vars`` into ``--conf spark.yarn.appMasterEnv.*`` /
      ``spark.kubernetes.driverEnv.*`` arguments, i.e. onto the command line: there a
      connection with credentials is refused (give the driver a cluster secret and set
      ``pass_mlflow_credentials=False``, which passes the tracking URI only).
    - When the driver runs on this machine (``local[*]`` and every client deploy mode),
      spark-submit starts in its own session, and killing the task terminates the whole
      process tree: spark-submit's group, then every descendant that moved to a group or
      session of its own (pyspark workers, Horovod's rank launchers call ``setsid``), with
      SIGTERM and, after ``kill_grace_period``, SIGKILL. In cluster deploy modes the provider
      kills the application through the cluster, unchanged.

    :param mlflow_conn_id: Airflow connection of the MLflow tracking server.
    :param pass_mlflow_credentials: Pass the connection's login/password/token to the job.
        ``False`` passes only ``MLFLOW_TRACKING_URI``; the job then needs its credentials
        from elsewhere (a Kubernetes secret, the cluster's credential store).
    :param kill_grace_period: Seconds between SIGTERM and SIGKILL when the task is killed.
        Airflow's task supervisor escalates to SIGKILL on the task itself after 5 s, so the
        whole clean-up must fit well inside that.
    :param kwargs: everything :class:`SparkSubmitOperator` takes.
    """

    def __init__(
        self,
        *,
        mlflow_conn_id: str = "mlflow_default",
        pass_mlflow_credentials: bool = True,
        kill_grace_period: float = 3.0,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.mlflow_conn_id = mlflow_conn_id
        self.pass_mlflow_credentials = pass_mlflow_credentials
        self.kill_grace_period = kill_grace_period

    def execute(self, context: Any) -> None:
        # A throw-away hook resolves the master exactly as the provider will; the real one is
        # created by the provider's execute, after its own conf injection.
        self.env_vars = {**(self.env_vars or {}), **self.mlflow_env(self._get_hook())}
        self._hook = None
        return super().execute(context)

    def mlflow_env(self, hook: SparkSubmitHook) -> dict[str, str]:
        """The MLflow variables for the job; credentials are masked in task logs, and refused
        where ``hook`` would put environment variables on the spark-submit command line."""
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
        if credentials and _env_vars_reach_command_line(hook):
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

    def _get_hook(self) -> SparkSubmitHook:
        hook = super()._get_hook()
        if _driver_runs_here(hook):
            # Its own session: the task's process group does not contain the job, and the job's
            # processes can be told apart from the worker's when the task is killed.
            hook.submit = functools.partial(hook.submit, start_new_session=True)
        return hook

    def on_kill(self) -> None:
        hook = self._hook
        if hook is not None and hook._submit_sp is not None and _driver_runs_here(hook):
            terminate_process_tree(hook._submit_sp.pid, grace_period=self.kill_grace_period, log=self.log)
        # Locally there is nothing left for the provider to kill; it still runs the
        # post-submit commands and, in cluster modes, kills the application on the cluster.
        super().on_kill()


def _driver_runs_here(hook: SparkSubmitHook) -> bool:
    return hook._connection["deploy_mode"] != "cluster"


def _env_vars_reach_command_line(hook: SparkSubmitHook) -> bool:
    return bool(hook._is_yarn or hook._is_kubernetes)


def terminate_process_tree(root_pid: int, *, grace_period: float, log: logging.Logger) -> list[int]:
    """SIGTERM, then SIGKILL after ``grace_period``, a process, its descendants and their groups.

    The tree is read before any signal is sent: once a parent dies its children are
    re-parented and can no longer be found from ``root_pid``. Besides each process, every
    process group in the tree is signalled, which also reaches members that were not
    (yet) visible as descendants. The caller's own group is never signalled.
    Returns the pids that were found.
    """
    import psutil

    try:
        root = psutil.Process(root_pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []
    own_group = os.getpgrp()
    groups = {pgid for pgid in (_pgid(p) for p in procs) if pgid is not None and pgid != own_group}
    log.info("Terminating spark-submit %d: %d processes in %d process groups", root_pid, len(procs), len(groups))
    _signal_all(procs, groups, signal.SIGTERM)
    _, alive = psutil.wait_procs(procs, timeout=grace_period)
    if alive:
        log.warning(
            "Killing %d processes still alive after %.1f s: %s", len(alive), grace_period, [p.pid for p in alive]
        )
    # The groups get SIGKILL in any case: it also reaches a process that joined one during
    # the grace period (a pyspark worker being forked).
    _signal_all(alive, groups, signal.SIGKILL)
    psutil.wait_procs(alive, timeout=1)
    return [p.pid for p in procs]


def _pgid(proc: psutil.Process) -> int | None:
    try:
        return os.getpgid(proc.pid)
    except (ProcessLookupError, PermissionError):
        return None


def _signal_all(procs: Iterable[psutil.Process], groups: Iterable[int], sig: signal.Signals) -> None:
    import psutil

    for pgid in groups:
        try:
            os.killpg(pgid, sig)
        except (ProcessLookupError, PermissionError):
            pass
    for proc in procs:
        try:
            proc.send_signal(sig)
        except psutil.NoSuchProcess:
            pass
