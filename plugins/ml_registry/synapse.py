"""The Azure Synapse counterpart of :mod:`ml_registry.spark_submit`: a Spark batch job on a
Synapse pool that talks to MLflow."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

from airflow.providers.microsoft.azure.operators.synapse import AzureSynapseRunSparkBatchOperator

from ml_contract.environment import MLFLOW_URI_VAR

# Synapse pools run Spark on YARN: the driver's environment comes from appMasterEnv.
ENV_CONF_PREFIXES = ("spark.yarn.appMasterEnv.", "spark.executorEnv.")


class MlflowSynapseSparkBatchOperator(AzureSynapseRunSparkBatchOperator):
    """Run a Spark batch job on an Azure Synapse pool.

    Behaves like :class:`AzureSynapseRunSparkBatchOperator`, with two differences:

    - ``payload`` is a dict of ``SparkBatchJobOptions`` fields (``name``, ``file``,
      ``arguments``, ``python_files``, ``configuration``, sizes) and is templated, so a job
      gets the same rendered arguments as its spark-submit twin; it becomes
      ``SparkBatchJobOptions`` at execute time.
    - At execute time the MLflow connection's tracking URI is added to the driver's and the
      executors' environment (``spark.yarn.appMasterEnv.MLFLOW_TRACKING_URI``,
      ``spark.executorEnv.MLFLOW_TRACKING_URI``). Its credentials are not: Synapse keeps the
      payload and shows it in its monitoring pages, so a server that needs them must get
      them from the pool (a Key Vault linked service), never from this operator.

    :param payload: ``SparkBatchJobOptions`` fields as a dict. (templated)
    :param mlflow_conn_id: Airflow connection of the MLflow tracking server.
    :param kwargs: everything :class:`AzureSynapseRunSparkBatchOperator` takes.
    """

    template_fields: Sequence[str] = (*AzureSynapseRunSparkBatchOperator.template_fields, "payload")
    template_fields_renderers = {"payload": "json"}

    def __init__(self, *, payload: dict[str, Any], mlflow_conn_id: str = "mlflow_default", **kwargs: Any) -> None:
        super().__init__(payload=payload, **kwargs)  # type: ignore[arg-type]  # a templated dict until execute()
        self.mlflow_conn_id = mlflow_conn_id

    def execute(self, context: Any) -> None:
        from azure.synapse.spark.models import SparkBatchJobOptions

        self.payload = SparkBatchJobOptions(**self.job_options())
        return super().execute(context)

    def job_options(self) -> dict[str, Any]:
        """The (rendered) payload with the MLflow tracking URI in the job's environment."""
        from ml_registry.hooks import MlflowRegistryHook

        tracking_uri = MlflowRegistryHook(mlflow_conn_id=self.mlflow_conn_id).tracking_uri
        payload = cast("dict[str, Any]", self.payload)  # still the dict given: execute() replaces it after this
        configuration = dict(payload.get("configuration") or {})
        configuration.update({f"{prefix}{MLFLOW_URI_VAR}": tracking_uri for prefix in ENV_CONF_PREFIXES})
        return {**payload, "configuration": configuration}
