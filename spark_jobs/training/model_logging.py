"""Logging the trained model to MLflow, the same way for every workflow.

The logged model is the workflow's serving form (:mod:`spark_jobs.serving`) as TorchScript
(pickle format), with a tensor signature: one input tensor in the workflow's dtype and
shape ``[-1, *shape]`` (what :func:`spark_jobs.features.decode` gives for a batch of the
``features`` column), output float32 ``[-1, classes]`` (probabilities) or ``[-1]`` (a
value); an input example of decoded rows; and the workflow's name in the model's metadata
(``metadata["workflow"]`` of ``mlflow.models.get_model_info``), so scoring and the registry
gate can tell which declaration a version belongs to.

The input tensor is unnamed on purpose: MLflow turns an array given to a model whose single
input is named into ``{name: array}``, which the pytorch flavor refuses, so
``mlflow.pyfunc.load_model(uri).predict(array)`` (and the input example's validation) would
fail.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np
    from mlflow.models import ModelSignature
    from pyspark.sql import DataFrame

    from spark_jobs.workflows import Workflow

EXAMPLE_ROWS = 5


def model_signature(workflow: Workflow) -> ModelSignature:
    """The tensor signature of ``workflow``'s serving model."""
    import numpy as np
    from mlflow.models import ModelSignature
    from mlflow.types import Schema, TensorSpec

    from spark_jobs.serving import output_shape

    layout = workflow.features
    return ModelSignature(
        inputs=Schema([TensorSpec(np.dtype(layout.dtype), (-1, *layout.shape))]),
        outputs=Schema([TensorSpec(np.dtype("float32"), output_shape(workflow))]),
    )


def example_rows(train_df: DataFrame, workflow: Workflow, rows: int = EXAMPLE_ROWS) -> np.ndarray:
    """The first ``rows`` rows' decoded features, ``[rows, *shape]``."""
    import numpy as np

    from spark_jobs.features import FEATURES_COL, decode

    table = train_df.select(FEATURES_COL).limit(rows).toArrow()
    return np.array(decode(table.column(FEATURES_COL), workflow.features))


def log_trained_model(workflow: Workflow, state_dict, train_df: DataFrame) -> str:
    """Log the trained weights' serving model to the active MLflow run, with five training
    rows as the input example; return its URI."""
    return log_serving_model(workflow, state_dict, example_rows(train_df, workflow))


def log_serving_model(workflow: Workflow, state_dict, example: np.ndarray) -> str:
    """Log the serving model of ``state_dict`` to the active MLflow run with ``example``
    (decoded features ``[n, *shape]``) as input example; return its URI.

    Raises ``ValueError`` when the model's output on the example does not have the
    declared shape (a factory that does not fit its ``[output]``).
    """
    import mlflow
    import numpy as np
    import torch

    from spark_jobs.inference import WORKFLOW_METADATA_KEY
    from spark_jobs.serving import output_shape, scripted_serving

    example = np.ascontiguousarray(example, dtype=np.dtype(workflow.features.dtype))
    serving = scripted_serving(workflow, state_dict)
    with torch.no_grad():
        produced = serving(torch.from_numpy(example.copy()))
    declared = output_shape(workflow)
    if produced.dim() != len(declared) or tuple(produced.shape[1:]) != declared[1:] or len(produced) != len(example):
        raise ValueError(
            f"workflow {workflow.name}: the model gives {tuple(produced.shape)} for {len(example)} rows, "
            f"its [output] {workflow.output.kind} declares {declared}"
        )
    info = mlflow.pytorch.log_model(
        serving,
        name="model",
        signature=model_signature(workflow),
        input_example=example,
        serialization_format="pickle",
        pip_requirements=[f"torch=={torch.__version__.split('+')[0]}", f"mlflow=={mlflow.__version__}"],
        metadata={WORKFLOW_METADATA_KEY: workflow.name},
    )
    return info.model_uri
