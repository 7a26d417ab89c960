"""The serving form of a trained model, the same for every workflow.

A workflow's module is what is trained (``[model] factory``): log-probabilities for a
classifier (``nll``), a value per row for a regressor (``mse``). What is logged and scored
wraps it by the workflow's ``[output] kind`` only, so scoring never needs per-workflow
code:

- ``class_probabilities``: ``exp(net(x))``, float32 ``[batch, classes]``;
- ``regression``: the value, float32 ``[batch]`` (a ``[batch, 1]`` output is flattened).

The wrapped module is scripted (TorchScript): it loads anywhere without this package.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

if TYPE_CHECKING:
    from spark_jobs.workflows import Workflow


class ClassProbabilities(nn.Module):
    """Class probabilities from a module returning log-probabilities."""

    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        self.net = net

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return torch.exp(self.net(features)).float()


class RegressionValue(nn.Module):
    """One value per row from a module returning ``[batch]`` or ``[batch, 1]``."""

    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        self.net = net

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return self.net(features).reshape(-1).float()


def serving_module(workflow: Workflow, net: nn.Module) -> nn.Module:
    """``net`` wrapped into the serving form of ``workflow``'s output, in eval mode."""
    wrapper = ClassProbabilities if workflow.output.is_classifier else RegressionValue
    return wrapper(net).eval()


def scripted_serving(workflow: Workflow, state_dict: Mapping[str, Any]) -> torch.jit.ScriptModule:
    """The TorchScript serving module of ``workflow`` with the trained weights ``state_dict``
    (tensors, or the numpy arrays a rank returns: ``spark_jobs.training.loop.weights_as_arrays``)."""
    from spark_jobs.workflows import model_factory

    net = model_factory(workflow)()
    net.load_state_dict({key: torch.as_tensor(value) for key, value in state_dict.items()})
    return torch.jit.script(serving_module(workflow, net))


def output_shape(workflow: Workflow) -> tuple[int, ...]:
    """The serving module's output shape, ``-1`` for the batch."""
    return (-1, workflow.output.classes) if workflow.output.is_classifier else (-1,)
