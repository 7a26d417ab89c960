"""The CNN, its serving form and the score job's transform, with a real MLflow registry
(SQLite store in a temporary folder; no server needed for in-process logging)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from pyspark.sql import types as T

from spark_jobs.inference import pin_model
from spark_jobs.model import MnistNet, scripted_classifier
from spark_jobs.sample_data import make_rows
from spark_jobs.schema import CURATED_SCHEMA, PIXEL_COLS, PROB_COLS


def test_net_outputs_log_probabilities_for_raw_pixels():
    out = MnistNet().eval()(torch.randint(0, 256, (4, 784)))
    assert out.shape == (4, 10)
    assert torch.allclose(out.exp().sum(dim=1), torch.ones(4), atol=1e-5)


def test_scripted_classifier_matches_the_net():
    net = MnistNet().eval()
    classifier = scripted_classifier(net.state_dict())
    x = torch.randint(0, 256, (3, 784)).float()
    assert torch.allclose(classifier(x), net(x).exp(), atol=1e-6)


@pytest.mark.parametrize("uri", ["runs:/abc/model", "models:/m", "models:/m/latest", "/tmp/model"])
def test_score_refuses_uris_that_cannot_name_a_version(uri):
    with pytest.raises(ValueError, match="not a registry URI"):
        pin_model(uri)


def test_pinned_uri_is_taken_as_is():
    assert pin_model("models:/mnist_cnn/7").uri == "models:/mnist_cnn/7"


@pytest.fixture()
def registered_model(tmp_path, monkeypatch):
    import mlflow
    from mlflow.models import infer_signature

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    mlflow.set_tracking_uri(f"sqlite:///{tmp_path / 'mlflow.db'}")
    torch.manual_seed(0)
    classifier = scripted_classifier(MnistNet().state_dict())
    _, pixels = make_rows("2026-11-28", 5)
    import pandas as pd

    example = pd.DataFrame(pixels.astype(np.int32), columns=PIXEL_COLS)
    experiment_id = mlflow.create_experiment("unit", artifact_location=(tmp_path / "artifacts").as_uri())
    with mlflow.start_run(experiment_id=experiment_id):
        info = mlflow.pytorch.log_model(
            classifier,
            name="model",
            signature=infer_signature(example, np.zeros((5, 10), dtype=np.float32)),
            serialization_format="pickle",
            registered_model_name="unit_mnist",
        )
    yield f"models:/unit_mnist/{info.registered_model_version}"
    mlflow.set_tracking_uri(None)


def test_score_partition_names_model_version_on_every_row(spark, registered_model):
    from spark_jobs.score import PREDICTION_COLS, score_partition

    labels, pixels = make_rows("2026-11-28", 20)
    rows = [
        (i, int(label), *map(int, p), "2026-11-28") for i, (label, p) in enumerate(zip(labels, pixels, strict=True))
    ]
    schema = T.StructType([*CURATED_SCHEMA.fields, T.StructField("ds", T.StringType())])
    curated = spark.createDataFrame(rows, schema)
    scored = score_partition(curated, pin_model(registered_model)).collect()
    assert len(scored) == 20
    assert list(scored[0].asDict()) == PREDICTION_COLS
    assert {(r["model_name"], r["model_version"]) for r in scored} == {("unit_mnist", "1")}
    for r in scored:
        probs = [r[c] for c in PROB_COLS]
        assert sum(probs) == pytest.approx(1.0, abs=1e-4)
        assert r["prediction"] == int(np.argmax(probs))


def test_bulk_scoring_replaces_each_partition_and_reports_missing_days(spark, registered_model, tmp_path):
    from spark_jobs.partitions import replace_partitions
    from spark_jobs.score import score_partitions

    schema = T.StructType([*CURATED_SCHEMA.fields, T.StructField("ds", T.StringType())])
    rows = []
    for ds, n in (("2026-11-01", 3), ("2026-11-03", 4)):
        labels, pixels = make_rows(ds, n)
        rows += [
            (hash((ds, i)), int(label), *map(int, p), ds)
            for i, (label, p) in enumerate(zip(labels, pixels, strict=True))
        ]
    curated_root, scored_root = str(tmp_path / "curated"), str(tmp_path / "scored")
    replace_partitions(spark.createDataFrame(rows, schema), curated_root)
    model = pin_model(registered_model)
    for _ in range(2):  # a re-run replaces, never appends
        report = score_partitions(spark, model, curated_root, scored_root, "2026-11-01", "2026-11-03")
    assert report["written"] == {"2026-11-01": 3, "2026-11-03": 4}
    assert report["missing_curated"] == ["2026-11-02"]
    assert spark.read.parquet(scored_root).count() == 7
