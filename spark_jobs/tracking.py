"""What a training run shows a model reviewer in MLflow, written by the train and register jobs.

- The experiment is of MLflow's "Machine learning" kind (experiment tag
  ``mlflow.experimentKind`` = ``custom_model_development``), so the UI opens it on its
  training runs and model metrics, not on the GenAI traces view.
- A run is named after the Airflow DAG run and the window that made it, and its
  description (``mlflow.note.content``) says the same in words, with the row counts.
- The training rows and the validation (held-out) rows are the run's datasets
  (``mlflow.log_input``, contexts ``training`` and ``validation``): source the curated root,
  the window in the name and the input tags, the exact row count in the profile.
- The register job adds the held-out evaluation to the same run, from MLflow's own
  evaluator (``mlflow.models.evaluate`` on a static predictions frame, ``classifier`` or
  ``regressor`` by the workflow's output): ``holdout_*`` metrics and, for a classifier,
  the confusion matrix (``holdout_confusion_matrix.png``) and per-class precision and
  recall (``per_class_metrics.csv``); and a table of sample predictions
  (``holdout_sample_predictions.json``). The evaluator's built-in classifier and regressor
  metrics are scikit-learn's and its plots matplotlib's: nothing is downloaded.

The held-out predictions are collected to the driver for the evaluator: at most
``EVALUATION_ROWS`` rows, the first by ``row_id`` (a content hash, so a stable and
unbiased choice); the gate's metric itself is computed by Spark over every held-out row.
The run's tag ``holdout_evaluation_rows`` says how many rows the evaluator saw.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from spark_jobs.inference import PREDICTION_COL
from spark_jobs.schema import LABEL_COL, ROW_ID_COL

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from spark_jobs.workflows import Workflow

EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
# The UI's "Machine learning" kind; "genai_development" is the traces-first one.
MODEL_TRAINING_KIND = "custom_model_development"
# Run tags the DAGs' train tasks give the job (``--tag``), naming the Airflow run.
DAG_ID_TAG, DAG_RUN_TAG = "airflow_dag_id", "airflow_run_id"
EVALUATION_ROWS = 20_000
EVALUATION_PREFIX = "holdout_"
EVALUATION_ROWS_TAG = "holdout_evaluation_rows"
SAMPLE_PREDICTION_ROWS = 50
SAMPLE_PREDICTIONS_FILE = "holdout_sample_predictions.json"


def parse_tag(value: str) -> tuple[str, str]:
    """A ``--tag KEY=VALUE`` option of the train and register jobs."""
    import argparse

    key, sep, val = value.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {value!r}")
    return key, val


def set_up_experiment(name: str) -> str:
    """The experiment ``name`` (created if missing) as the active one, of the model-training
    kind unless someone chose another kind for it; returns its id."""
    import mlflow

    experiment = mlflow.set_experiment(name)
    if EXPERIMENT_KIND_TAG not in experiment.tags:
        mlflow.MlflowClient().set_experiment_tag(experiment.experiment_id, EXPERIMENT_KIND_TAG, MODEL_TRAINING_KIND)
    return experiment.experiment_id


def window_text(start_ds: str, end_ds: str) -> str:
    return start_ds if start_ds == end_ds else f"{start_ds}..{end_ds}"


def run_name(workflow: str, start_ds: str, end_ds: str, tags: dict[str, str]) -> str:
    """``<dag_id>/<run_id> <window>`` for a run made by Airflow, else ``train <workflow> <window>``."""
    window = window_text(start_ds, end_ds)
    if run_id := tags.get(DAG_RUN_TAG):
        return f"{tags.get(DAG_ID_TAG, 'airflow')}/{run_id} {window}"
    return f"train {workflow} {window}"


def run_description(
    workflow: str,
    start_ds: str,
    end_ds: str,
    tags: dict[str, str],
    *,
    curated_root: str,
    rows: dict[str, int],
    backend: str,
    num_ranks: int,
    epochs: int,
) -> str:
    """The run's description (Markdown): who made it, on which data, how."""
    if run_id := tags.get(DAG_RUN_TAG):
        made_by = f"Trained by Airflow DAG `{tags.get(DAG_ID_TAG, '?')}`, run `{run_id}`"
    else:
        made_by = "Trained outside Airflow (no DAG run given)"
    return (
        f"{made_by}, on the `{workflow}` curated window {window_text(start_ds, end_ds)} "
        f"(`{curated_root}`): {rows['training']:,} training rows, {rows['validation']:,} held-out validation rows "
        f"evaluated after every epoch (`val_*` metrics); {epochs} epochs on {num_ranks} {backend} ranks.\n\n"
        f"The register job evaluates the final model on the same held-out rows: `{EVALUATION_PREFIX}*` metrics, "
        f"the confusion matrix and per-class metrics of a classifier, and sample predictions "
        f"({SAMPLE_PREDICTIONS_FILE})."
    )


def _window_dataset(df: DataFrame, *, name: str, curated_root: str, rows: int, start_ds: str, end_ds: str):
    """A Spark dataset whose profile is its exact row count and window (MLflow's own profile
    is an approximate count from a second Spark job)."""
    from mlflow.data.spark_dataset import SparkDataset
    from mlflow.data.spark_dataset_source import SparkDatasetSource

    class CuratedWindowDataset(SparkDataset):
        @property
        def profile(self):
            return {"num_rows": rows, "start_ds": start_ds, "end_ds": end_ds}

    return CuratedWindowDataset(df, source=SparkDatasetSource(path=curated_root), targets=LABEL_COL, name=name)


def log_training_data(
    datasets: dict[str, DataFrame],
    rows: dict[str, int],
    *,
    workflow: str,
    curated_root: str,
    start_ds: str,
    end_ds: str,
) -> None:
    """Log each of ``datasets`` (context -> rows of the window) as an input of the active run."""
    import mlflow

    window = window_text(start_ds, end_ds)
    for context, df in datasets.items():
        dataset = _window_dataset(
            df,
            name=f"{workflow} curated {window} {context}",
            curated_root=curated_root,
            rows=rows[context],
            start_ds=start_ds,
            end_ds=end_ds,
        )
        mlflow.log_input(dataset, context=context, tags={"start_ds": start_ds, "end_ds": end_ds})


def log_holdout_evaluation(
    predicted_df: DataFrame, workflow: Workflow, run_id: str, *, curated_root: str, start_ds: str, end_ds: str
) -> dict[str, float]:
    """MLflow's evaluation of the held-out predictions (``label``, ``prediction`` and the
    workflow's other output columns), logged to the training run ``run_id`` with a table of
    sample predictions; returns the evaluator's metrics."""
    import mlflow
    from mlflow.data.pandas_dataset import from_pandas  # mlflow.data.from_pandas, which mlflow sets at run time
    from mlflow.data.spark_dataset_source import SparkDatasetSource

    sample = predicted_df.orderBy(ROW_ID_COL).limit(EVALUATION_ROWS).toPandas()
    data = from_pandas(
        sample[[LABEL_COL, PREDICTION_COL]],
        source=SparkDatasetSource(path=curated_root),
        targets=LABEL_COL,
        predictions=PREDICTION_COL,
        name=f"{workflow.name} held-out {window_text(start_ds, end_ds)}",
    )
    config: dict = {"metric_prefix": EVALUATION_PREFIX}
    if workflow.output.is_classifier:
        # Every class on the matrix's axes, also one the sample happens not to contain.
        config["label_list"] = list(range(workflow.output.classes))
    with mlflow.start_run(run_id=run_id):
        result = mlflow.models.evaluate(
            data=data,
            model_type="classifier" if workflow.output.is_classifier else "regressor",
            evaluator_config=config,
        )
        mlflow.log_table(sample.head(SAMPLE_PREDICTION_ROWS), artifact_file=SAMPLE_PREDICTIONS_FILE)
        mlflow.set_tag(EVALUATION_ROWS_TAG, str(len(sample)))
    return dict(result.metrics)
