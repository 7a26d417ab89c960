"""Scoring (``mapInArrow`` over the dense ``features`` column) and evaluation, for both
workflows, with models logged the way the train job logs them (TorchScript serving module,
tensor signature, ``metadata={"workflow": ...}``) into a real MLflow registry (SQLite store
in a temporary folder; no server needed in-process)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch
from pyspark.sql import types as T

from spark_jobs import workflows
from spark_jobs.features import decode
from spark_jobs.inference import PREDICTION_COL, evaluate, pin_model, predict, with_predictions
from spark_jobs.schema import curated_arrow_table
from spark_jobs.workflows.diabetes import DiabetesNet
from spark_jobs.workflows.mnist import MnistNet

MNIST, DIABETES = workflows.load("mnist"), workflows.load("diabetes")
DS = "2026-11-28"


class Probabilities(torch.nn.Module):
    """The classifier's serving form: class probabilities from log-probabilities."""

    def __init__(self, net: torch.nn.Module) -> None:
        super().__init__()
        self.net = net

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return torch.exp(self.net(features))


def serving_module(workflow: workflows.Workflow) -> torch.jit.ScriptModule:
    torch.manual_seed(0)
    module = Probabilities(MnistNet()) if workflow.output.is_classifier else DiabetesNet()
    return torch.jit.script(module.eval())


def signature(workflow: workflows.Workflow):
    from mlflow.models import ModelSignature
    from mlflow.types import Schema, TensorSpec

    out = (-1, workflow.output.classes) if workflow.output.is_classifier else (-1,)
    layout = workflow.features
    return ModelSignature(
        inputs=Schema([TensorSpec(np.dtype(layout.dtype), (-1, *layout.shape), name="features")]),
        outputs=Schema([TensorSpec(np.dtype("float32"), out)]),
    )


def features_of(workflow: workflows.Workflow, rows: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(labels, features ``[rows, *shape]``) in the workflow's ranges."""
    rng = np.random.default_rng(seed)
    if workflow.output.is_classifier:
        return rng.integers(0, 10, rows), rng.integers(0, 256, (rows, *workflow.features.shape))
    low, high = workflow.features.mins, workflow.features.maxs
    return rng.uniform(25, 300, rows), rng.uniform(low, high, (rows, len(low))).astype(np.float32)


def write_curated(root: Path, workflow: workflows.Workflow, days: dict[str, int]) -> str:
    """Curated partitions as a non-Spark writer leaves them (footer metadata included)."""
    for index, (ds, rows) in enumerate(days.items()):
        labels, features = features_of(workflow, rows, seed=index)
        partition = root / f"ds={ds}"
        partition.mkdir(parents=True)
        table = curated_arrow_table(workflow, np.arange(rows) + 1000 * index, labels, features)
        pq.write_table(table, partition / "part-00000.parquet", row_group_size=max(1, rows // 2))
    return str(root)


@pytest.fixture(scope="module")
def tracking(tmp_path_factory):
    import mlflow

    folder = tmp_path_factory.mktemp("mlflow")
    uri = f"sqlite:///{folder / 'mlflow.db'}"
    mp = pytest.MonkeyPatch()
    mp.setenv("MLFLOW_TRACKING_URI", uri)
    mlflow.set_tracking_uri(uri)
    experiment_id = mlflow.create_experiment("unit", artifact_location=(folder / "artifacts").as_uri())
    yield experiment_id
    mlflow.set_tracking_uri(None)
    mp.undo()


def log_model(
    experiment_id: str, workflow: workflows.Workflow, name: str, *, metadata: bool = True, module=None
) -> str:
    import mlflow

    with mlflow.start_run(experiment_id=experiment_id):
        info = mlflow.pytorch.log_model(
            serving_module(workflow) if module is None else module,
            name="model",
            signature=signature(workflow),
            serialization_format="pickle",
            metadata={"workflow": workflow.name} if metadata else None,
            registered_model_name=name,
        )
    return f"models:/{name}/{info.registered_model_version}"


@pytest.fixture(scope="module")
def mnist_model(tracking) -> str:
    return log_model(tracking, MNIST, "unit_mnist")


@pytest.fixture(scope="module")
def diabetes_model(tracking) -> str:
    return log_model(tracking, DIABETES, "unit_diabetes")


@pytest.fixture(scope="module")
def anonymous_model(tracking) -> str:
    """Logged without the workflow in its metadata (as before workflows)."""
    return log_model(tracking, DIABETES, "unit_anonymous", metadata=False)


@pytest.fixture(scope="module")
def eager_diabetes_model(tracking) -> str:
    """A pickled eager module, not TorchScript: workers load it through ``mlflow.pytorch``."""
    torch.manual_seed(0)
    return log_model(tracking, DIABETES, "unit_eager", module=DiabetesNet().eval())


def curated_df(spark, tmp_path, workflow, rows=20):
    from spark_jobs.partitions import read_partitions

    root = write_curated(tmp_path / "curated", workflow, {DS: rows})
    return read_partitions(spark, root, DS, DS)


# -- registry URIs ----------------------------------------------------------------------------


@pytest.mark.parametrize("uri", ["runs:/abc/model", "models:/m", "models:/m/latest", "/tmp/model"])
def test_score_refuses_uris_that_cannot_name_a_version(uri):
    with pytest.raises(ValueError, match="not a registry URI"):
        pin_model(uri)


def test_pinned_uri_is_taken_as_is():
    assert pin_model("models:/mnist_cnn/7").uri == "models:/mnist_cnn/7"


# -- scoring ----------------------------------------------------------------------------------


def test_mnist_scoring_gives_class_probabilities_and_their_argmax(spark, tmp_path, mnist_model):
    from spark_jobs.score import prediction_columns, score_partition

    scored = score_partition(curated_df(spark, tmp_path, MNIST), pin_model(mnist_model), MNIST)
    assert scored.columns == prediction_columns(MNIST)
    assert scored.columns == [
        "row_id",
        "prediction",
        *[f"prob_{c}" for c in range(10)],
        "model_name",
        "model_version",
        "ds",
    ]
    types = {f.name: f.dataType for f in scored.schema.fields}
    assert types["prediction"] == T.IntegerType() and types["prob_3"] == T.DoubleType()
    rows = scored.collect()
    assert len(rows) == 20
    assert {(r["model_name"], r["model_version"], r["ds"]) for r in rows} == {("unit_mnist", "1", DS)}
    for r in rows:
        probs = [r[f"prob_{c}"] for c in range(10)]
        assert sum(probs) == pytest.approx(1.0, abs=1e-5)
        assert r["prediction"] == int(np.argmax(probs))


def test_regression_scoring_gives_the_modules_value_for_the_decoded_rows(spark, tmp_path, diabetes_model):
    from spark_jobs.score import prediction_columns, score_partition

    curated = curated_df(spark, tmp_path, DIABETES, rows=30)
    scored = score_partition(curated, pin_model(diabetes_model), DIABETES)
    assert (
        scored.columns == prediction_columns(DIABETES) == ["row_id", "prediction", "model_name", "model_version", "ds"]
    )
    assert scored.schema["prediction"].dataType == T.DoubleType()
    got = {r["row_id"]: r["prediction"] for r in scored.collect()}

    table = curated.select("row_id", "features").toArrow()
    with torch.no_grad():
        expected = serving_module(DIABETES)(torch.from_numpy(np.array(decode(table["features"], DIABETES.features))))
    want = dict(zip(table["row_id"].to_pylist(), expected.numpy().tolist(), strict=True))
    assert got.keys() == want.keys()
    for row_id, value in want.items():
        assert got[row_id] == pytest.approx(value, rel=1e-6)


def test_an_eager_model_scores_like_its_torchscript_form(spark, tmp_path, diabetes_model, eager_diabetes_model):
    from spark_jobs.inference import ship_model

    assert ship_model(spark, eager_diabetes_model, DIABETES).torchscript is None
    curated = curated_df(spark, tmp_path, DIABETES, rows=10)
    scripted = {r["row_id"]: r["prediction"] for r in with_predictions(curated, diabetes_model, DIABETES).collect()}
    eager = {r["row_id"]: r["prediction"] for r in with_predictions(curated, eager_diabetes_model, DIABETES).collect()}
    assert eager.keys() == scripted.keys()
    assert all(eager[k] == pytest.approx(scripted[k], rel=1e-6) for k in eager)


def test_predictions_keep_every_input_column_but_the_features(spark, tmp_path, mnist_model):
    predicted = with_predictions(curated_df(spark, tmp_path, MNIST, rows=5), mnist_model, MNIST)
    assert predicted.columns == ["row_id", "label", "ds", *MNIST.output.columns]
    assert predicted.count() == 5


def test_each_scoring_ships_its_model_to_the_executors_under_a_name_of_its_own(spark, mnist_model):
    """Tasks find the model through ``SparkFiles`` (what Spark distributed), and two models
    shipped in one session (a register job's candidate and champion) never share a name."""
    from pyspark import SparkFiles

    from spark_jobs.inference import ship_model

    first, second = ship_model(spark, mnist_model, MNIST), ship_model(spark, mnist_model, MNIST)
    assert first.name != second.name
    assert first.torchscript == "data/model.pth"  # loads with torch alone, no MLflow import in workers
    shipped = {Path(uri.rstrip("/")).name for uri in spark.sparkContext.listArchives}
    assert {first.name, second.name} <= shipped

    def where(batches):
        import pyarrow as pa

        for _ in batches:
            path = Path(SparkFiles.get(first.name))
            found = path.parent == Path(SparkFiles.getRootDirectory()) and (path / "MLmodel").is_file()
            yield pa.RecordBatch.from_pylist([{"in_spark_files": found}])

    seen = spark.range(1).mapInArrow(where, "in_spark_files boolean").collect()
    assert seen and all(row["in_spark_files"] for row in seen)


def test_a_malformed_features_value_fails_the_job_naming_it(spark, tmp_path, mnist_model):
    import pyarrow as pa

    from ml_contract.tensors import SPARK_ROW_METADATA
    from spark_jobs.schema import curated_schema

    partition = tmp_path / "curated" / f"ds={DS}"
    partition.mkdir(parents=True)
    table = pa.table(
        {
            "row_id": pa.array([1, 2], pa.int64()),
            "label": pa.array([3, 4], pa.int32()),
            "features": [b"\0" * 784, b"\0" * 783],
        }
    )
    table = table.replace_schema_metadata({SPARK_ROW_METADATA: curated_schema(MNIST).json().encode()})
    pq.write_table(table, partition / "part-00000.parquet")
    from spark_jobs.partitions import read_partitions

    predicted = with_predictions(read_partitions(spark, str(tmp_path / "curated"), DS, DS), mnist_model, MNIST)
    with pytest.raises(Exception, match="features value 1 is 783 bytes, expected 784"):
        predicted.collect()


def test_bulk_scoring_replaces_each_partition_and_reports_missing_days(spark, mnist_model, tmp_path):
    from spark_jobs.score import score_partitions

    curated_root = write_curated(tmp_path / "curated", MNIST, {"2026-11-01": 3, "2026-11-03": 4})
    scored_root = str(tmp_path / "scored")
    model = pin_model(mnist_model)
    for _ in range(2):  # a re-run replaces, never appends
        report = score_partitions(spark, model, MNIST, curated_root, scored_root, "2026-11-01", "2026-11-03")
    assert report["written"] == {"2026-11-01": 3, "2026-11-03": 4}
    assert report["missing_curated"] == ["2026-11-02"]
    assert report["workflow"] == "mnist"
    assert spark.read.parquet(scored_root).count() == 7


# -- which workflow -------------------------------------------------------------------------------


def test_the_workflow_defaults_to_the_models_metadata(diabetes_model, mnist_model):
    from spark_jobs.score import workflow_of

    assert workflow_of(pin_model(diabetes_model), None) == DIABETES
    assert workflow_of(pin_model(mnist_model), None) == MNIST
    assert workflow_of(pin_model(mnist_model), "mnist") == MNIST


def test_a_model_naming_no_workflow_needs_the_flag(anonymous_model):
    from spark_jobs.score import workflow_of

    declared = ", ".join(workflows.available())
    with pytest.raises(ValueError, match=rf"names no workflow .*pass --workflow, one of {declared}"):
        workflow_of(pin_model(anonymous_model), None)
    assert workflow_of(pin_model(anonymous_model), "diabetes") == DIABETES


def test_a_model_logged_for_another_workflow_is_refused(spark, tmp_path, mnist_model):
    with pytest.raises(ValueError, match=r"was logged for workflow 'mnist', not 'diabetes'"):
        with_predictions(curated_df(spark, tmp_path, DIABETES, rows=3), mnist_model, DIABETES)


def test_a_model_taking_another_tensor_is_refused():
    from mlflow.models import Model

    from spark_jobs.inference import check_model

    mlmodel = Model(signature=signature(MNIST))
    with pytest.raises(ValueError, match=r"takes uint8 \[28, 28\]; workflow diabetes features are float32 \[10\]"):
        check_model(mlmodel, "models:/x/1", DIABETES)
    check_model(Model(signature=signature(DIABETES)), "models:/x/1", DIABETES)


def test_a_model_output_of_the_wrong_shape_is_refused():
    features = np.zeros((4, 28, 28), dtype=np.uint8)
    with pytest.raises(ValueError, match=r"returned \[4, 3\] for 4 rows; workflow mnist needs class probabilities"):
        predict(lambda x: torch.zeros(len(x), 3), features, MNIST)
    with pytest.raises(ValueError, match=r"returned \[4, 2\] for 4 rows; workflow diabetes needs one value per row"):
        predict(lambda x: torch.zeros(len(x), 2), features.reshape(4, -1)[:, :10].astype(np.float32), DIABETES)


def test_predict_on_an_empty_batch_gives_empty_columns():
    columns = predict(serving_module(MNIST), np.zeros((0, 28, 28), dtype=np.uint8), MNIST)
    assert [len(c) for c in columns] == [0] * 11


# -- evaluation ---------------------------------------------------------------------------------


def predicted(spark, pairs: list[tuple], label_type: T.DataType, prediction_type: T.DataType):
    schema = T.StructType([T.StructField("label", label_type), T.StructField(PREDICTION_COL, prediction_type)])
    return spark.createDataFrame(pairs, schema)


def test_accuracy_is_the_share_of_rows_predicted_right(spark):
    df = predicted(spark, [(1, 1), (2, 2), (3, 0), (4, 4)], T.IntegerType(), T.IntegerType())
    assert evaluate(df, MNIST) == (0.75, 4)


def test_rmse_is_the_root_of_the_mean_squared_error(spark):
    df = predicted(spark, [(100.0, 103.0), (50.0, 46.0), (10.0, 10.0)], T.FloatType(), T.DoubleType())
    value, rows = evaluate(df, DIABETES)
    assert rows == 3 and value == pytest.approx(math.sqrt((9 + 16 + 0) / 3))


def test_no_rows_evaluate_to_nan_which_no_floor_accepts(spark):
    for workflow, label, prediction in (
        (MNIST, T.IntegerType(), T.IntegerType()),
        (DIABETES, T.FloatType(), T.DoubleType()),
    ):
        value, rows = evaluate(predicted(spark, [], label, prediction), workflow)
        assert rows == 0 and math.isnan(value)


def test_evaluating_a_scored_holdout_end_to_end(spark, tmp_path, diabetes_model):
    """evaluate(with_predictions(...)) as the register job does, against numpy on the same rows."""
    curated = curated_df(spark, tmp_path, DIABETES, rows=25)
    value, rows = evaluate(with_predictions(curated, diabetes_model, DIABETES), DIABETES)
    table = curated.select("label", "features").toArrow()
    with torch.no_grad():
        out = serving_module(DIABETES)(torch.from_numpy(np.array(decode(table["features"], DIABETES.features))))
    labels = table["label"].to_numpy().astype(np.float64)
    assert rows == 25
    assert value == pytest.approx(float(np.sqrt(np.mean((out.numpy().astype(np.float64) - labels) ** 2))), rel=1e-6)


def test_the_scoring_pass_samples_its_rows_with_their_statistics_and_returns_only_predictions(
    spark, tmp_path, diabetes_model
):
    """With a sampling, every task hands the driver its rows of smallest ``row_id`` (with the
    prediction it wrote and the declared statistics of the row's features), the result keeps
    the plain prediction columns, and a second action over the same rows does not add them
    twice."""
    from spark_jobs import monitoring
    from spark_jobs.score import prediction_columns, score_partition

    rows, kept = 50, 20
    curated = curated_df(spark, tmp_path, DIABETES, rows=rows).repartition(3)
    sampling = monitoring.scoring_sample(spark, DIABETES, watched=True)
    sampling = type(sampling)(sampling.accumulator, kept, sampling.statistics)
    scored = score_partition(curated, pin_model(diabetes_model), DIABETES, sampling)
    assert scored.columns == prediction_columns(DIABETES)
    written = {r["row_id"]: r["prediction"] for r in scored.collect()}
    scored.count()  # the same tasks again: their rows replace the first ones

    (day,) = monitoring.day_samples(sampling).values()
    np.testing.assert_array_equal(day["row_id"], sorted(written)[:kept])
    assert day["prediction"].tolist() == pytest.approx([written[r] for r in day["row_id"].tolist()], rel=1e-6)
    table = curated.select("row_id", "features").toArrow()
    features = dict(zip(table["row_id"].to_pylist(), decode(table["features"], DIABETES.features), strict=True))
    statistics = monitoring.row_statistics(np.stack([features[r] for r in day["row_id"].tolist()]), DIABETES)
    assert set(statistics) == set(DIABETES.monitoring.statistics)
    for name, values in statistics.items():
        np.testing.assert_allclose(day[name], values)
