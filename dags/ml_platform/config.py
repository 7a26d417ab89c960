"""All settings of the ML DAGs, in one place.

Every value has a default for the embedded single-machine stack and an environment
variable to override it for a cluster; endpoints and secrets are not here but in Airflow
connections (``spark_default``, ``mlflow_default``, a ``wasb`` connection for an Azure
landing zone, ``azure_synapse_default``). Reading the environment is the only thing done
at import: DAG files are parsed continuously and must stay cheap.
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError, model_validator
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, EnvSettingsSource, SettingsConfigDict

from ml_contract.layout import HOLDOUT_PCT, SPLIT_SEED, partition_path
from ml_platform.workflows import WorkflowInfo
from ml_platform.workflows import enabled as enabled_workflows
from ml_platform.workflows import workflow as workflow_info

REPO_ROOT = Path(__file__).resolve().parents[2]


def _env(name: str, default: str) -> str:
    return os.environ.get(name) or default


# Spark settings that hold wherever a job runs (also on a Synapse pool).
PORTABLE_SPARK_CONF = {"spark.sql.shuffle.partitions": "8", "spark.ui.showConsoleProgress": "false"}
# The embedded stack's driver JVM (which, on local[N], is also the executor) runs jobs of
# seconds to minutes: compiling with C1 only and collecting with one thread takes about half
# the CPU of the JVM's defaults (a register job: 31 -> 17 CPU seconds on 2 cores). A cluster
# whose drivers run long jobs sets ML_SPARK_DRIVER_JAVA_OPTIONS ("" for the JVM's defaults).
SHORT_JOB_JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
# Spark's classes mapped from this environment's class-data sharing archive instead of loaded
# one by one (scripts/spark_cds.py writes it: a small job 12.5 -> 8.6 CPU seconds). Used when
# the file exists; a JVM whose runtime or jars no longer match it runs without it.
SPARK_CDS_ARCHIVE = Path(sys.prefix) / "spark-cds.jsa"


def short_job_jvm_options() -> str:
    """The embedded stack's driver JVM options: :data:`SHORT_JOB_JVM_OPTIONS`, and the
    class-data sharing archive where this environment has one."""
    if SPARK_CDS_ARCHIVE.is_file():
        return f"{SHORT_JOB_JVM_OPTIONS} -XX:SharedArchiveFile={SPARK_CDS_ARCHIVE}"
    return SHORT_JOB_JVM_OPTIONS


AZURE_STORAGE_URL = re.compile(
    r"^(?:abfss?|wasbs?)://(?P<container>[^@/]+)@(?P<account>[^./]+)\.(?:dfs|blob)\.core\.windows\.net(?P<path>/.*)?$"
)


@dataclass(frozen=True)
class TrainingDefaults:
    """The nightly run's training settings (also the defaults of on-demand runs): the
    workflow's declared epochs, rate and batch size, the platform's ranks, backend and window."""

    epochs: int
    learning_rate: float
    batch_size: int  # per rank
    num_ranks: int = 0  # 0: one rank per Spark slot
    backend: str = "horovod"  # or "torch_distributor" (Spark's TorchDistributor)
    window_days: int = 3
    holdout_pct: int = HOLDOUT_PCT
    split_seed: int = SPLIT_SEED

    @classmethod
    def of(cls, info: WorkflowInfo) -> TrainingDefaults:
        return cls(epochs=info.epochs, learning_rate=info.learning_rate, batch_size=info.batch_size)


@dataclass(frozen=True)
class SynapseResources:
    """Driver and executor sizes of a Synapse Spark batch job: Small nodes (4 vCores, 32 GB)."""

    driver_memory: str = "28g"
    driver_cores: int = 4
    executor_memory: str = "28g"
    executor_cores: int = 4


# Fields that are not settings: the workflow a configuration is for, and what derives from it.
NOT_FROM_ENV = frozenset({"workflow", "model_name", "experiment_name", "synapse_resources", "training"})
# Settings whose empty variable is a value, not "unset".
EMPTY_IS_A_VALUE = frozenset({"driver_java_options"})


class _Environment(EnvSettingsSource):
    """The ``ML_*`` variables of the fields that are settings; an empty variable counts as
    unset (the default holds) except where empty is a value (:data:`EMPTY_IS_A_VALUE`)."""

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        if field_name in NOT_FROM_ENV:
            return None, field_name, False
        value, key, is_complex = super().get_field_value(field, field_name)
        if value == "" and field_name not in EMPTY_IS_A_VALUE:
            return None, key, is_complex
        return value, key, is_complex


class PlatformConfig(BaseSettings):
    """The settings of one workflow's DAGs: each field is read from ``ML_<FIELD>`` (or the
    variable its alias names) when not given; a bad value is refused naming the variable."""

    model_config = SettingsConfigDict(env_prefix="ML_", frozen=True, extra="forbid", validate_by_name=True)

    # The workflow whose DAGs this configures (spark_jobs/workflows/<name>.toml): datasets,
    # registered model, experiment and training defaults derive from it.
    workflow: str = "mnist"
    storage_root: str = str(REPO_ROOT / "var" / "data")
    # Registered model and experiment: the workflow's registered_name unless
    # ML_<WORKFLOW>_MODEL_NAME / ML_<WORKFLOW>_EXPERIMENT_NAME say otherwise.
    model_name: str = ""
    experiment_name: str = ""
    spark_conn_id: str = "spark_default"
    mlflow_conn_id: str = "mlflow_default"
    # Where spark-submit finds the entry points and the --py-files archive of spark_jobs.
    jobs_root: str = str(REPO_ROOT / "spark_jobs" / "entrypoints")
    jobs_archive: str = str(REPO_ROOT / "build" / "spark_jobs.zip")
    pyspark_python: str = sys.executable
    spark_log_config: str = str(REPO_ROOT / "conf" / "log4j2.properties")
    # An empty value is kept: the JVM's defaults.
    driver_java_options: str = Field(
        default_factory=short_job_jvm_options, validation_alias="ML_SPARK_DRIVER_JAVA_OPTIONS"
    )
    git_revision: str = "unknown"
    # The share of a drop's rows that may be quarantined before ingest fails.
    max_bad_ratio: float = Field(0.05, ge=0, le=1)
    # false on YARN/Kubernetes, where the driver gets MLflow credentials from a cluster
    # secret: spark-submit then receives only the tracking URI (docs/security.md).
    pass_mlflow_credentials: bool = True
    # Airflow connection for reading and writing the storage root from Airflow tasks (staging,
    # manifests); empty: the file system's own defaults (none needed for local paths).
    storage_conn_id: str = ""
    # Landing zone: the day's raw drop arrives in this blob container (``wasb`` connection)
    # and is staged into the storage root before ingest. Empty container: no landing zone,
    # the drop is written straight into the storage root.
    landing_conn_id: str = "wasb_default"
    landing_container: str = ""
    # How long a day's raw drop is waited for: until this many hours after the end of the day
    # it holds (UTC); then the run's wait_for_raw_drop ends as skipped, and with it the run.
    raw_drop_deadline_hours: float = Field(24, gt=0, le=24 * 30)
    # Called (``module:callable``, given the task's context) when a day's drop missed its
    # deadline, beside the warning in the task's log: a page, a chat message, a ticket.
    raw_drop_alert: str = ""
    # Training checkpoints (any fsspec URL); empty: no checkpoints. Credentials for remote
    # URLs come from the jobs' environment (e.g. AZURE_STORAGE_CONNECTION_STRING), never args.
    checkpoint_root: str = ""
    # Where Spark jobs run: spark-submit through ``spark_conn_id``, or an Azure Synapse pool.
    submit_target: Literal["spark", "synapse"] = Field("spark", validation_alias="ML_SPARK_SUBMIT_TARGET")
    synapse_conn_id: str = "azure_synapse_default"
    synapse_pool: str = ""
    synapse_executors: int = Field(2, ge=1)
    synapse_resources: SynapseResources = Field(default_factory=SynapseResources)
    training: TrainingDefaults | None = None

    def __init__(self, **values: Any) -> None:
        try:
            super().__init__(**values)
        except ValidationError as err:
            raise ValueError(_settings_errors(err)) from None

    @classmethod
    def settings_customise_sources(
        cls, settings_cls, init_settings, env_settings, dotenv_settings, file_secret_settings
    ) -> tuple:
        """The arguments given, then the environment (no ``.env`` file, no secrets folder)."""
        return init_settings, _Environment(settings_cls)

    @model_validator(mode="after")
    def _derive_from_the_workflow(self) -> PlatformConfig:
        info = workflow_info(self.workflow)
        prefix = f"ML_{self.workflow.upper()}_"
        # Frozen: derived fields are set once, here.
        object.__setattr__(self, "model_name", self.model_name or _env(prefix + "MODEL_NAME", info.model_name))
        object.__setattr__(
            self, "experiment_name", self.experiment_name or _env(prefix + "EXPERIMENT_NAME", info.model_name)
        )
        if self.training is None:
            object.__setattr__(self, "training", TrainingDefaults.of(info))
        if self.submit_target == "synapse" and not self.synapse_pool:
            raise ValueError("ML_SPARK_SUBMIT_TARGET=synapse needs ML_SYNAPSE_POOL (the Spark pool's name)")
        return self

    @property
    def training_defaults(self) -> TrainingDefaults:
        """:attr:`training`, never None once validated (the model validator derives it)."""
        assert self.training is not None  # set by _derive_from_the_workflow
        return self.training

    def spark_conf(self) -> dict[str, str]:
        """The Spark settings every job gets (resources come from the spark connection): the
        one place they are built, for the DAGs' tasks, the local stack, tests and benchmarks."""
        java_options = f"-Dlog4j2.configurationFile=file:{self.spark_log_config} {self.driver_java_options}"
        return {
            "spark.pyspark.python": self.pyspark_python,
            "spark.pyspark.driver.python": self.pyspark_python,
            "spark.driver.extraJavaOptions": java_options.strip(),
            **PORTABLE_SPARK_CONF,
        }

    # The one path builder: every dataset location derives from storage_root.
    def dataset_key(self, name: str) -> str:
        """A dataset's folder relative to the storage root (and to the landing container):
        ``<dataset>/<workflow>``, e.g. ``curated/mnist``."""
        return f"{name}/{self.workflow}"

    def dataset_root(self, name: str) -> str:
        return f"{self.storage_root.rstrip('/')}/{self.dataset_key(name)}"

    @property
    def raw_root(self) -> str:
        return self.dataset_root("raw")

    @property
    def curated_root(self) -> str:
        return self.dataset_root("curated")

    @property
    def quarantine_root(self) -> str:
        return self.dataset_root("quarantine")

    @property
    def predictions_root(self) -> str:
        return self.dataset_root("predictions")

    @property
    def labels_root(self) -> str:
        """Late labels of scored rows, dropped per day (``ds=<day>/*.csv``: ``row_id,<label>``)."""
        return self.dataset_root("labels")

    @property
    def monitoring_root(self) -> str:
        """The drift reports of the scored days (``ds=<day>/drift.json``, ``drift.png``)."""
        return self.dataset_root("monitoring")

    @staticmethod
    def storage_uri(path: str) -> str:
        """``path`` as a URI (``file://`` for local paths), for Assets and object storage."""
        # Not Path.as_uri(): it would percent-encode the Jinja braces of templated paths.
        return path if "://" in path else f"file://{os.path.abspath(path)}"

    @classmethod
    def object_storage_uri(cls, path: str) -> str:
        """``path`` as Airflow object storage (adlfs) takes it: :meth:`storage_uri`, with Azure's
        ``abfss://<container>@<account>.dfs.core.windows.net/<path>`` (or ``wasbs://…blob…``)
        as ``abfs://<container>/<path>``. Airflow would read ``<container>@`` as a connection
        id; the account comes from the connection instead."""
        uri = cls.storage_uri(path)
        match = AZURE_STORAGE_URL.match(uri)
        return f"abfs://{match['container']}{match['path'] or ''}" if match else uri

    @staticmethod
    def partition_path(root: str, ds: str) -> str:
        return partition_path(root, ds)

    def raw_path(self, ds: str) -> str:
        return self.partition_path(self.raw_root, ds)

    def landing_prefix(self, ds: str) -> str:
        """Blob prefix of the day's drop in the landing container: the raw layout, ``raw/<workflow>/ds=<ds>/``."""
        return f"{self.partition_path(self.dataset_key('raw'), ds)}/"

    @property
    def lock_root(self) -> str:
        """Partition locks (``<dataset>/ds=<ds>.lock``): one writer per partition at a time."""
        return f"{self.storage_root.rstrip('/')}/_locks"

    def run_dir(self, dag_id: str, run_key: str) -> str:
        """Scratch and hand-off files of one DAG run (manifests, training shards)."""
        return f"{self.storage_root.rstrip('/')}/_runs/{dag_id}/{run_key}"

    def checkpoint_dir(self, dag_id: str, run_key: str) -> str:
        """Training checkpoints of one DAG run: a retried task resumes from the latest."""
        return f"{self.checkpoint_root.rstrip('/')}/{dag_id}/{run_key}"

    def application(self, job: str) -> str:
        return f"{self.jobs_root.rstrip('/')}/{job}.py"


DEFAULT_ARGS = {
    "owner": "ml-platform",
    "retries": 2,
    # The first retry's delay (doubled for each further one, with Airflow's jitter).
    "retry_delay": timedelta(seconds=float(_env("ML_RETRY_DELAY_SECONDS", "60"))),
    "retry_exponential_backoff": True,
    "max_retry_delay": timedelta(minutes=10),
    "execution_timeout": timedelta(hours=2),
}


def _settings_errors(err: ValidationError) -> str:
    """A settings error in lines naming the environment variable, what is allowed and the
    value given (pydantic's own message names the field only)."""
    lines = []
    for error in err.errors():
        name = str(error["loc"][0]) if error["loc"] else ""
        # A field read through its alias is named by the alias (the variable) already.
        alias = getattr(PlatformConfig.model_fields.get(name), "validation_alias", None)
        variable = name if name.startswith("ML_") else alias or (f"ML_{name.upper()}" if name else "")
        message = error["msg"].removeprefix("Value error, ")
        lines.append(f"{variable}: {message} (got {error['input']!r})" if variable else message)
    return "; ".join(lines)


def load_config(workflow: str = "mnist") -> PlatformConfig:
    """The settings of ``workflow``'s DAGs."""
    return PlatformConfig(workflow=workflow)


def load_configs() -> list[PlatformConfig]:
    """One configuration per enabled workflow (``ML_WORKFLOWS``), for the DAG factories."""
    return [PlatformConfig(workflow=info.name) for info in enabled_workflows()]
