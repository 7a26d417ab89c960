"""Batch inference with a pinned MLflow model: the one place that scores a DataFrame.

Scoring is a ``mapInArrow`` over the dense ``features`` column, not ``mlflow.pyfunc.
spark_udf``: each Arrow batch's tensors decode with one ``numpy.frombuffer``
(:func:`spark_jobs.features.decode`) and go to torch as they are, where the pyfunc UDF
would build a pandas frame, enforce a column schema and convert it back per batch.

The driver downloads the pinned version's artifacts once and ships them as a zip archive
with ``SparkContext.addArchive`` (Spark refuses ``addFile`` of a directory on a cluster
master); each executor unpacks it, and a Python worker loads it from ``SparkFiles`` the
first time one of its tasks needs it, and keeps it for the worker's later tasks. Executors never read a
driver-local path or the registry, so the same code runs on ``local[2]`` and on a cluster.
A TorchScript model (what the train job logs) loads with ``torch.jit.load`` alone: a
worker does not import MLflow (2.5 s a worker here); any other PyTorch model loads with
``mlflow.pytorch.load_model``.

The model is the workflow's serving form (logged by the train job): ``features`` ``[n,
*shape]`` in the workflow's dtype in, class probabilities ``[n, classes]`` (a classifier)
or one value per row (``[n]``, a regression) out.
"""

from __future__ import annotations

import atexit
import logging
import math
import os
import re
import shutil
import tempfile
import uuid
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from ml_contract.layout import PARTITION_COL
from spark_jobs.features import FEATURES_COL, decode
from spark_jobs.schema import LABEL_COL, ROW_ID_COL

if TYPE_CHECKING:
    import numpy as np
    import pyarrow as pa
    from pyspark.accumulators import Accumulator

    from spark_jobs.workflows import Workflow

log = logging.getLogger(__name__)

PREDICTION_COL = "prediction"
MODEL_NAME_COL = "model_name"
MODEL_VERSION_COL = "model_version"
# MLmodel metadata key naming the workflow a model was trained for (set by the train job).
WORKFLOW_METADATA_KEY = "workflow"
# Rows per forward pass, whatever the Arrow batch size: the activations of a few hundred
# rows stay in the CPU caches (the MNIST CNN on one thread: ~7k rows/s at 512, ~4.5k at 4096).
FORWARD_ROWS = 512

_PINNED = re.compile(r"^models:/(?P<name>[^/@]+)/(?P<version>\d+)$")
_ALIASED = re.compile(r"^models:/(?P<name>[^/@]+)@(?P<alias>[\w-]+)$")

# Per Python worker: shipped folder name -> loaded model (a reused worker loads it once).
_LOADED: dict[str, object] = {}


@dataclass(frozen=True)
class ShippedModel:
    """A model folder distributed with ``addArchive``: its name for ``SparkFiles.get`` (the
    unpacked folder on an executor), and its TorchScript file inside it (None: load it with
    ``mlflow.pytorch``)."""

    name: str
    torchscript: str | None


@dataclass(frozen=True)
class PinnedModel:
    name: str
    version: str

    @property
    def uri(self) -> str:
        return f"models:/{self.name}/{self.version}"


def pin_model(model_uri: str) -> PinnedModel:
    """Resolve a registry URI to one version, once, on the driver.

    ``models:/<name>/<version>`` is taken as is; ``models:/<name>@<alias>`` is resolved now
    so that every executor loads the same version even if the alias moves mid-job.
    """
    if match := _PINNED.match(model_uri):
        return PinnedModel(match["name"], match["version"])
    if match := _ALIASED.match(model_uri):
        from mlflow import MlflowClient

        version = MlflowClient().get_model_version_by_alias(match["name"], match["alias"])
        return PinnedModel(match["name"], str(version.version))
    raise ValueError(
        f"model {model_uri!r} is not a registry URI: use models:/<name>/<version> "
        "or models:/<name>@<alias> so every scored row can name its model version"
    )


def output_fields(workflow: Workflow) -> list[T.StructField]:
    """The workflow's output columns: ``prediction`` (int class or double value), ``prob_<c>``."""
    if workflow.output.is_classifier:
        return [
            T.StructField(PREDICTION_COL, T.IntegerType(), nullable=False),
            *[T.StructField(name, T.DoubleType(), nullable=False) for name in workflow.output.columns[1:]],
        ]
    return [T.StructField(PREDICTION_COL, T.DoubleType(), nullable=False)]


# Per-row values computed from the decoded features in the scoring pass itself: the
# function of ``[n, *shape]`` features giving them, by name.
RowStatistics = Callable[["np.ndarray"], dict[str, "np.ndarray"]]


SHADOW_PREDICTION_COL = "shadow_prediction"


@dataclass(frozen=True)
class RowSampling:
    """What the scoring pass gathers besides the rows it returns: per day, at most
    ``max_rows`` rows (:mod:`spark_jobs.row_sample`) of ``row_id``, ``prediction``, the
    ``statistics`` and, scoring a shadow, ``shadow_prediction``, handed to ``accumulator``
    (:func:`spark_jobs.row_sample.accumulator`) by each task; read once the job is done
    (:func:`spark_jobs.row_sample.day_samples`)."""

    accumulator: Accumulator
    max_rows: int
    statistics: RowStatistics | None = None


def with_predictions(
    features_df: DataFrame,
    model_uri: str,
    workflow: Workflow,
    shadow_uri: str | None = None,
    sampling: RowSampling | None = None,
) -> DataFrame:
    """``features_df``'s columns but ``features``, plus the workflow's output columns.

    With ``sampling``, the scoring pass also gathers a sample of its rows with their
    statistics (the drift check's), computed from the same decoded batches, and with
    ``shadow_uri`` that model's prediction of the sampled rows, made in the same pass
    (shadow scoring): none of them is a column of the result. ``features_df`` then needs
    ``row_id`` and ``ds``.

    ``model_uri`` is downloaded here, on the driver, once; it must have been logged for
    ``workflow`` (its MLmodel metadata and tensor signature are checked when present).
    """
    if FEATURES_COL not in features_df.columns:
        raise ValueError(f"scoring {model_uri}: the input has no {FEATURES_COL!r} column ({features_df.columns})")
    kept = [field for field in features_df.schema.fields if field.name != FEATURES_COL]
    clash = {f.name for f in kept} & set(workflow.output.columns)
    if clash:
        raise ValueError(f"scoring {model_uri}: the input already has output column(s) {sorted(clash)}")
    if shadow_uri is not None and sampling is None:
        raise ValueError(f"scoring {shadow_uri} in the shadow of {model_uri} needs a sampling of the rows")
    if sampling is not None and not {ROW_ID_COL, PARTITION_COL} <= {f.name for f in kept}:
        raise ValueError(f"sampling the rows scored by {model_uri} needs columns {ROW_ID_COL!r} and {PARTITION_COL!r}")
    schema = T.StructType([*kept, *output_fields(workflow)])
    spark = features_df.sparkSession
    shipped = ship_model(spark, model_uri, workflow)
    shadow = None if shadow_uri is None else (ship_model(spark, shadow_uri, workflow), shadow_uri)
    threads = int(spark.sparkContext.getConf().get("spark.task.cpus", "1"))
    scorer = _scorer(shipped, workflow, [f.name for f in kept], threads, model_uri, sampling, shadow)
    return features_df.mapInArrow(scorer, schema)


def ship_model(spark, model_uri: str, workflow: Workflow) -> ShippedModel:
    """Download ``model_uri``'s artifacts, check them against ``workflow``, ship them to
    the executors.

    Every call ships an archive of its own name: an executor keeps files by name, and two
    models (the candidate and the champion in one register job) must not collide. The
    archive stays on the driver until the job ends (executors fetch it from there).
    """
    import mlflow.artifacts
    from mlflow.models import Model

    parent = tempfile.mkdtemp(prefix="ml-model-")
    atexit.register(shutil.rmtree, parent, ignore_errors=True)
    folder = mlflow.artifacts.download_artifacts(artifact_uri=model_uri, dst_path=f"{parent}/download")
    mlmodel = Model.load(folder)
    check_model(mlmodel, model_uri, workflow)
    name = f"model-{uuid.uuid4().hex[:12]}"
    archive = shutil.make_archive(f"{parent}/{name}", "zip", root_dir=folder)
    spark.sparkContext.addArchive(archive)
    log.info("shipping %s to the executors as %s", model_uri, os.path.basename(archive))
    return ShippedModel(os.path.basename(archive), _torchscript_archive(folder, mlmodel, model_uri))


def _torchscript_archive(folder: str, mlmodel, model_uri: str) -> str | None:
    """The model's TorchScript archive, relative to ``folder``, or None (another format)."""
    flavor = mlmodel.flavors.get("pytorch")
    if flavor is None:
        raise ValueError(f"model {model_uri} is not a PyTorch model (flavors: {', '.join(mlmodel.flavors)})")
    relative = os.path.join(flavor.get("model_data", "data"), "model.pth")
    path = os.path.join(folder, relative)
    if not zipfile.is_zipfile(path):
        return None
    with zipfile.ZipFile(path) as archive:
        names = archive.namelist()
    # torch.jit.save writes <root>/code/ (the compiled modules) and <root>/constants.pkl.
    scripted = any("/code/" in n for n in names) and any(n.endswith("/constants.pkl") for n in names)
    return relative if scripted else None


def check_model(mlmodel, model_uri: str, workflow: Workflow) -> None:
    """Refuse a model logged for another workflow or another tensor layout.

    A model without ``workflow`` metadata or a tensor signature (logged before workflows)
    is not refused here: its output shape is still checked on every batch.
    """
    logged_for = (mlmodel.metadata or {}).get(WORKFLOW_METADATA_KEY)
    if logged_for is not None and logged_for != workflow.name:
        raise ValueError(f"model {model_uri} was logged for workflow {logged_for!r}, not {workflow.name!r}")
    signature = mlmodel.signature
    inputs = None if signature is None else signature.inputs
    if inputs is None or not inputs.is_tensor_spec():
        log.warning("model %s has no tensor input signature: its input layout is not checked", model_uri)
        return
    spec = inputs.inputs[0]
    takes = (spec.type.name, list(spec.shape[1:]))
    holds = (workflow.features.dtype, list(workflow.features.shape))
    if takes != holds:
        raise ValueError(
            f"model {model_uri} takes {takes[0]} {takes[1]}; "
            f"workflow {workflow.name} features are {holds[0]} {holds[1]}"
        )


def _scorer(
    shipped: ShippedModel,
    workflow: Workflow,
    kept: list[str],
    threads: int,
    model_uri: str,
    sampling: RowSampling | None = None,
    shadow: tuple[ShippedModel, str] | None = None,
):
    """The ``mapInArrow`` function (pickled to the Python workers with its arguments)."""

    def score_batches(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import pyarrow as pa
        import torch
        from pyspark import TaskContext

        from spark_jobs.row_sample import KEY, TaskSample

        context = TaskContext.get()
        torch.set_num_threads(max(1, int(context.cpus()) if context is not None else threads))
        model = _load_shipped(shipped)
        shadow_model = None if shadow is None else _load_shipped(shadow[0])
        sample = None if sampling is None else TaskSample(sampling.max_rows)
        names = [*kept, *workflow.output.columns]
        for batch in batches:
            features = decode(batch.column(FEATURES_COL), workflow.features)
            outputs = predict(model, features, workflow, model_uri)
            if sample is not None:
                assert sampling is not None
                rows = {KEY: batch.column(ROW_ID_COL).to_numpy(), PREDICTION_COL: outputs[0].to_numpy()}
                if sampling.statistics is not None:
                    rows.update(sampling.statistics(features))
                if shadow is not None:
                    rows[SHADOW_PREDICTION_COL] = predict(shadow_model, features, workflow, shadow[1])[0].to_numpy()
                sample.add(batch.column(PARTITION_COL).to_numpy(zero_copy_only=False), rows)
            yield pa.RecordBatch.from_arrays([*(batch.column(c) for c in kept), *outputs], names=names)
        if sample is not None:
            assert sampling is not None
            # Once, after the task's last batch: the driver reads it when the job is done.
            sampling.accumulator.add(sample.rows(context.partitionId() if context is not None else 0))

    return score_batches


def _load_shipped(shipped: ShippedModel):
    """The shipped model, loaded once per Python worker."""
    model = _LOADED.get(shipped.name)
    if model is None:
        from pyspark import SparkFiles

        folder = SparkFiles.get(shipped.name)
        if shipped.torchscript is not None:
            import torch

            model = torch.jit.load(os.path.join(folder, shipped.torchscript), map_location="cpu")
        else:
            import mlflow.pytorch

            model = mlflow.pytorch.load_model(folder, map_location="cpu")
        model = prepared_for_inference(model)
        _LOADED[shipped.name] = model
    return model


def prepared_for_inference(model):
    """``model`` in eval mode, and a TorchScript model frozen and optimised for inference.

    Freezing inlines the weights as constants; ``optimize_for_inference`` then rewrites the
    convolutions to oneDNN's and folds what it can: the same outputs, and the MNIST CNN's
    forward about 1.5-3x faster on one CPU thread. The benchmark's ceiling uses the same
    function. A module that cannot be frozen (an eager one, or one that TorchScript refuses)
    is scored as it is.
    """
    import torch

    model.eval()
    if not isinstance(model, torch.jit.ScriptModule):
        return model
    try:
        return torch.jit.optimize_for_inference(torch.jit.freeze(model))
    except RuntimeError as err:  # a model TorchScript cannot freeze still scores, unoptimised
        log.warning("scoring the TorchScript model unoptimised: %s", str(err).splitlines()[0])
        return model


def predict(model, features: np.ndarray, workflow: Workflow, model_uri: str = "the model") -> list[pa.Array]:
    """The workflow's output columns for ``features`` ``[n, *shape]``, as Arrow arrays."""
    import warnings

    import numpy as np
    import pyarrow as pa
    import torch

    n = len(features)
    with warnings.catch_warnings():
        # The decoded batch is a read-only view of the Arrow buffer; the model never writes it.
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        inputs = torch.from_numpy(features)
    parts = []
    with torch.inference_mode():
        for first in range(0, n, FORWARD_ROWS):
            parts.append(model(inputs[first : first + FORWARD_ROWS]).numpy())
    if workflow.output.is_classifier:
        classes = workflow.output.classes
        probs = np.concatenate(parts) if parts else np.zeros((0, classes), dtype=np.float32)
        if probs.shape != (n, classes):
            raise ValueError(
                f"{model_uri} returned {list(probs.shape)} for {n} rows; workflow {workflow.name} "
                f"needs class probabilities [{n}, {classes}]"
            )
        prediction = pa.array(np.argmax(probs, axis=1).astype(np.int32)) if n else pa.array([], pa.int32())
        # One transposing cast: each class's column is then a contiguous row Arrow wraps as is.
        by_class = np.ascontiguousarray(probs.T, dtype=np.float64)
        return [prediction, *(pa.array(by_class[c]) for c in range(classes))]
    values = np.concatenate([p.reshape(len(p), -1) for p in parts]) if parts else np.zeros((0, 1), np.float32)
    if values.shape != (n, 1):
        raise ValueError(
            f"{model_uri} returned {list(values.shape)} for {n} rows; workflow {workflow.name} needs one value per row"
        )
    return [pa.array(values[:, 0].astype(np.float64))]


def evaluate(predicted_df: DataFrame, workflow: Workflow, label_col: str = LABEL_COL) -> tuple[float, int]:
    """(the workflow's metric over the rows, rows evaluated), with Spark aggregates.

    ``accuracy``: the share of rows whose ``prediction`` equals the label; ``rmse``: the root
    of the mean squared difference. No rows give NaN, which no promotion floor accepts.
    """
    prediction, label = F.col(PREDICTION_COL), F.col(label_col)
    if workflow.metric.name == "accuracy":
        value = F.avg((prediction == label).cast("double"))
    elif workflow.metric.name == "rmse":
        value = F.sqrt(F.avg(F.pow(prediction.cast("double") - label.cast("double"), 2)))
    else:
        raise ValueError(f"workflow {workflow.name}: no evaluation for metric {workflow.metric.name!r}")
    row = predicted_df.agg(value.alias("value"), F.count(F.lit(1)).alias("n")).first()
    assert row is not None  # an aggregation without grouping has exactly one row
    if not row["n"] or row["value"] is None:
        return math.nan, int(row["n"])
    return float(row["value"]), int(row["n"])
