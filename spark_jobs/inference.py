"""Batch inference with a pinned MLflow model: the one place that builds the scoring UDF."""

from __future__ import annotations

import re
from dataclasses import dataclass

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from spark_jobs.schema import NUM_CLASSES, PIXEL_COLS, PROB_COLS

PREDICTION_COL = "prediction"
MODEL_NAME_COL = "model_name"
MODEL_VERSION_COL = "model_version"
_PROBS = "_probs"

_PINNED = re.compile(r"^models:/(?P<name>[^/@]+)/(?P<version>\d+)$")
_ALIASED = re.compile(r"^models:/(?P<name>[^/@]+)@(?P<alias>[\w-]+)$")


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


def with_predictions(features_df: DataFrame, model_uri: str) -> DataFrame:
    """Add ``prediction`` (argmax class) and ``prob_0..prob_9`` from the model's probabilities."""
    import mlflow.pyfunc

    udf = mlflow.pyfunc.spark_udf(
        features_df.sparkSession,
        model_uri,
        result_type=T.ArrayType(T.FloatType()),
        env_manager="local",
    )
    probs = F.col(_PROBS)
    return (
        features_df.withColumn(_PROBS, udf(F.struct(*PIXEL_COLS)))
        .withColumn(PREDICTION_COL, (F.array_position(probs, F.array_max(probs)) - 1).cast("int"))
        .select(
            "*",
            *[probs.getItem(c).cast("double").alias(PROB_COLS[c]) for c in range(NUM_CLASSES)],
        )
        .drop(_PROBS)
    )


def accuracy(predicted_df: DataFrame, label_col: str = "label") -> tuple[float, int]:
    """(share of rows whose prediction equals the label, rows evaluated)."""
    row = predicted_df.agg(
        F.avg((F.col(PREDICTION_COL) == F.col(label_col)).cast("double")).alias("acc"),
        F.count(F.lit(1)).alias("n"),
    ).first()
    return (float(row["acc"]) if row["n"] else 0.0), int(row["n"])
