"""The seed workload's CNN (the PyTorch MNIST tutorial) and its serving form."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class MnistNet(nn.Module):
    """Two 5x5 conv layers (10, 20 channels, dropout), two linear layers, log-softmax.

    Takes raw 0..255 pixels as ``[batch, 784]`` so the model is scored straight from the
    curated table's columns.
    """

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 10, kernel_size=5)
        self.conv2 = nn.Conv2d(10, 20, kernel_size=5)
        self.conv2_drop = nn.Dropout2d()
        self.fc1 = nn.Linear(320, 50)
        self.fc2 = nn.Linear(50, 10)

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        # Literals, not module constants: TorchScript cannot close over Python globals.
        # 0.1307 / 0.3081 are the tutorial's MNIST mean / std on 0..1 pixels.
        x = pixels.reshape(-1, 1, 28, 28).float()
        x = (x / 255.0 - 0.1307) / 0.3081
        x = F.relu(F.max_pool2d(self.conv1(x), 2))
        x = F.relu(F.max_pool2d(self.conv2_drop(self.conv2(x)), 2))
        x = x.flatten(1)
        x = F.relu(self.fc1(x))
        x = F.dropout(x, training=self.training)
        return F.log_softmax(self.fc2(x), dim=1)


class MnistClassifier(nn.Module):
    """Serving form: class probabilities (one column per digit) from raw pixels."""

    def __init__(self, net: MnistNet) -> None:
        super().__init__()
        self.net = net

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        return torch.exp(self.net(pixels))


def scripted_classifier(state_dict: dict[str, torch.Tensor]) -> torch.jit.ScriptModule:
    """TorchScript classifier from trained weights: loads anywhere without this package."""
    net = MnistNet()
    net.load_state_dict(state_dict)
    classifier = MnistClassifier(net).eval()
    return torch.jit.script(classifier)
