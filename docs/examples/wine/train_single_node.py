"""Wine cultivars: a plain, single-node PyTorch training script (the guide's starting point).

Nothing here knows about Spark, Airflow or MLflow: it loads scikit-learn's bundled wine
set (178 wines, 13 measurements, 3 cultivars), trains a small MLP on one process and
prints the held-out accuracy. docs/bring_your_own_model.md turns it into the ``wine``
workflow (``wine.toml`` + ``wine.py`` beside this file).

    python docs/examples/wine/train_single_node.py
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from sklearn.datasets import load_wine
from torch import nn

# Per-measurement mean and standard deviation of the bundled set.
MEAN = [13.001, 2.336, 2.367, 19.495, 99.742, 2.295, 2.029, 0.362, 1.591, 5.058, 0.957, 2.612, 746.893]
STD = [0.81, 1.114, 0.274, 3.33, 14.242, 0.624, 0.996, 0.124, 0.571, 2.312, 0.228, 0.708, 314.022]


class WineNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("mean", torch.tensor(MEAN))
        self.register_buffer("std", torch.tensor(STD))
        self.layers = nn.Sequential(nn.Linear(13, 32), nn.ReLU(), nn.Linear(32, 3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.log_softmax(self.layers((x.float() - self.mean) / self.std), dim=1)


def main(epochs: int = 60, batch_size: int = 16, lr: float = 0.05) -> float:
    torch.manual_seed(0)
    data = load_wine()
    x = torch.tensor(data.data, dtype=torch.float32)
    y = torch.tensor(data.target, dtype=torch.int64)
    order = torch.randperm(len(y), generator=torch.Generator().manual_seed(1))
    test, train = order[:36], order[36:]
    net = WineNet()
    optimizer = torch.optim.SGD(net.parameters(), lr=lr, momentum=0.9)
    for epoch in range(1, epochs + 1):
        net.train()
        for idx in train[torch.randperm(len(train))].split(batch_size):
            optimizer.zero_grad()
            loss = F.nll_loss(net(x[idx]), y[idx])
            loss.backward()
            optimizer.step()
        if epoch % 20 == 0:
            print(f"epoch {epoch}: loss {loss.item():.4f}")
    net.eval()
    with torch.no_grad():
        accuracy = float((net(x[test]).argmax(dim=1) == y[test]).float().mean())
    print(f"held-out accuracy {accuracy:.3f} on {len(test)} wines")
    return accuracy


if __name__ == "__main__":
    main()
