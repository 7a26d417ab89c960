"""The model the train job logs, for each workflow, in-process on a SQLite tracking store:
the generic serving form (probabilities or a value), its tensor signature, the workflow in
its metadata, and that the loaders scoring and users rely on take it."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from spark_jobs import workflows
from spark_jobs.sample_data import make_rows
from spark_jobs.serving import scripted_serving
from spark_jobs.training.model_logging import log_serving_model

OUTPUT_SHAPE = {"mnist": (-1, 10), "diabetes": (-1,)}


@pytest.fixture(scope="module")
def experiment(tmp_path_factory):
    import mlflow

    folder = tmp_path_factory.mktemp("model-logging")
    mlflow.set_tracking_uri(f"sqlite:///{folder / 'mlflow.db'}")
    try:
        yield mlflow.create_experiment("model-logging", artifact_location=(folder / "artifacts").as_uri())
    finally:
        mlflow.set_tracking_uri(None)


def trained_weights(workflow: workflows.Workflow) -> dict[str, torch.Tensor]:
    torch.manual_seed(0)
    return workflows.model_factory(workflow)().state_dict()


@pytest.mark.parametrize("name", ["mnist", "diabetes"])
def test_serving_form_is_the_workflows_output(name):
    workflow = workflows.load(name)
    weights = trained_weights(workflow)
    _, features = make_rows(workflow, "2026-11-28", 6)
    served = scripted_serving(workflow, weights)(torch.from_numpy(features))
    assert served.dtype == torch.float32
    assert tuple(served.shape) == (6, *OUTPUT_SHAPE[name][1:])
    net = workflows.model_factory(workflow)()
    net.load_state_dict(weights)
    raw = net.eval()(torch.from_numpy(features))
    # Probabilities from the net's log-probabilities; the value itself for a regression.
    expected = torch.exp(raw) if workflow.output.is_classifier else raw.reshape(-1)
    torch.testing.assert_close(served, expected)


@pytest.mark.parametrize("name", ["mnist", "diabetes"])
def test_logged_model_has_a_tensor_signature_metadata_and_loads(experiment, name, tmp_path):
    import mlflow

    workflow = workflows.load(name)
    _, features = make_rows(workflow, "2026-11-28", 5)
    with mlflow.start_run(experiment_id=experiment):
        uri = log_serving_model(workflow, trained_weights(workflow), features)

    info = mlflow.models.get_model_info(uri)
    assert info.metadata == {"workflow": name}
    (inputs,) = info.signature.inputs.inputs
    (outputs,) = info.signature.outputs.inputs
    assert (inputs.type, inputs.shape) == (np.dtype(workflow.features.dtype), (-1, *workflow.features.shape))
    assert (outputs.type, outputs.shape) == (np.dtype("float32"), OUTPUT_SHAPE[name])
    if name == "mnist":
        assert (inputs.type, inputs.shape) == (np.dtype("uint8"), (-1, 28, 28))
    assert info.saved_input_example_info is not None

    # What users and the input example's validation do: pyfunc over decoded features.
    predicted = mlflow.pyfunc.load_model(uri).predict(features)
    assert isinstance(predicted, np.ndarray) and predicted.dtype == np.float32
    assert predicted.shape == (5, *OUTPUT_SHAPE[name][1:])
    # What scoring does: the scripted module from the downloaded folder.
    local = mlflow.artifacts.download_artifacts(uri, dst_path=str(tmp_path))
    module = mlflow.pytorch.load_model(local)
    assert isinstance(module, torch.jit.ScriptModule)
    with torch.no_grad():
        np.testing.assert_allclose(module(torch.from_numpy(features)).numpy(), predicted, rtol=1e-6)


def test_a_model_that_does_not_give_the_declared_output_is_not_logged(experiment):
    import mlflow

    mnist = workflows.load("mnist")
    # Declares ten classes; a net trained for three gives [n, 3].
    three_classes = workflows.Workflow(**{**vars(mnist), "output": workflows.Output("class_probabilities", 3)})
    with mlflow.start_run(experiment_id=experiment), pytest.raises(ValueError, match=r"gives \(2, 10\)"):
        log_serving_model(three_classes, trained_weights(mnist), np.zeros((2, 28, 28), dtype=np.uint8))
