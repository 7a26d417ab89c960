"""The few collective operations the training loop needs, and their two backends.

- :class:`HorovodCollective` (``--backend horovod``): Horovod's ops, gradients averaged by
  ``hvd.DistributedOptimizer``;
- :class:`TorchCollective` (``--backend torch_distributor``): ``torch.distributed`` from
  torchrun's environment (Gloo on CPU, NCCL on CUDA) and ``DistributedDataParallel``.
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import torch


class Collective(Protocol):
    """The few collective operations the training loop needs, whatever the backend.

    Values cross as plain Python numbers so the loop never cares where a backend wants
    its communication tensors (NCCL: on the GPU; Gloo, Horovod's CPU ops: on the host).
    """

    rank: int
    size: int
    local_rank: int

    def allreduce_sum(self, values: list[float]) -> list[float]: ...

    def allreduce_min(self, value: int) -> int: ...

    def distribute(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> tuple[Any, Any]:
        """Give every rank rank 0's initial state; return (model to call, optimizer to step)
        such that each step applies the gradients averaged over all ranks."""
        ...

    def step(self, optimizer: Any, parameters: list[torch.nn.Parameter], max_norm: float) -> None:
        """One optimizer step on the averaged gradients, their norm first clipped to
        ``max_norm`` when it is above 0 (:func:`clipped_step`)."""
        ...

    def close(self) -> None: ...


def clipped_step(optimizer: Any, parameters: list[torch.nn.Parameter], max_norm: float) -> None:
    """``optimizer.step()`` after clipping the gradients' L2 norm to ``max_norm`` (0: no
    clipping), for a backend whose gradients are averaged once backward returns (DDP, one
    process)."""
    if max_norm > 0:
        import torch

        torch.nn.utils.clip_grad_norm_(parameters, max_norm)
    optimizer.step()


# How often a Horovod rank looks whether a collective operation it waits for is done: after
# 0.2 ms first, then twice as long each time up to 1 ms. A gradient average that is done
# within a millisecond is seen at once; a rank waiting seconds for a slower one (on 2 cores,
# or for a straggler) polls a thousand times a second, not 3,500: a sleeping poll loop of 0.2 ms
# spent 0.084 CPU s per second of waiting, one backing off to 1 ms 0.025 (2026-12-07); two real
# ranks, one 2 s late: 1.09 CPU s in the wait instead of 1.18, the rest Horovod's own thread.
HOROVOD_POLL_S = 0.0002
HOROVOD_POLL_MAX_S = 0.001


class HorovodCollective:
    """Horovod: broadcast parameters and optimizer state, ``hvd.DistributedOptimizer``.

    Every wait for a collective operation sleeps between polls (:meth:`wait`): Horovod
    0.28's own blocking wait (``synchronize``, which ``hvd.allreduce`` and the optimizer's
    step call) spins on ``std::this_thread::yield()``, so a rank that waits for a slower one
    burns a core meanwhile, on a small machine the very core the slower rank needs (a quarter
    of the Horovod ranks' CPU in a ``make demo``).
    """

    def __init__(self) -> None:
        import horovod.torch as hvd

        hvd.init()
        self._hvd = hvd
        self.rank, self.size, self.local_rank = hvd.rank(), hvd.size(), hvd.local_rank()

    def _until_done(self, handle: int) -> None:
        """Return once the asynchronous operation ``handle`` is done, polled with sleeps in
        between that grow from :data:`HOROVOD_POLL_S` to :data:`HOROVOD_POLL_MAX_S`."""
        pause = HOROVOD_POLL_S
        while not self._hvd.poll(handle):
            time.sleep(pause)
            pause = min(2 * pause, HOROVOD_POLL_MAX_S)

    def wait(self, handle: int) -> Any:
        """The result of the asynchronous operation ``handle``: ``synchronize`` returns at
        once after ``poll`` said it was done."""
        self._until_done(handle)
        return self._hvd.synchronize(handle)

    def allreduce_sum(self, values: list[float]) -> list[float]:
        import torch

        tensor = torch.tensor(values, dtype=torch.float64)
        return self.wait(self._hvd.allreduce_async(tensor, op=self._hvd.Sum)).tolist()

    def allreduce_min(self, value: int) -> int:
        import torch

        return int(self.wait(self._hvd.allreduce_async(torch.tensor(value), op=self._hvd.Min)))

    def distribute(self, model, optimizer):
        # hvd.broadcast_parameters, with the quiet wait: every tensor's broadcast started, then awaited.
        handles = [
            self._hvd.broadcast_async_(tensor, root_rank=0, name=name) for name, tensor in model.state_dict().items()
        ]
        for handle in handles:
            self.wait(handle)
        self._hvd.broadcast_optimizer_state(optimizer, root_rank=0)
        return model, self._hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())

    def wait_for_gradients(self, optimizer) -> None:
        """Wait quietly for the gradient averages that backward started (the hooks of
        ``hvd.DistributedOptimizer``), so that its ``synchronize`` finds them done."""
        for handle, _ in list(optimizer._handles.values()):
            if isinstance(handle, int):
                self._until_done(handle)

    def step(self, optimizer, parameters, max_norm):
        """Horovod averages gradients asynchronously: clipping must wait for the averages
        (``synchronize``), then step without averaging again (Horovod's documented recipe)."""
        self.wait_for_gradients(optimizer)
        if max_norm <= 0:
            optimizer.step()
            return
        import torch

        optimizer.synchronize()
        torch.nn.utils.clip_grad_norm_(parameters, max_norm)
        with optimizer.skip_synchronize():
            optimizer.step()

    def close(self) -> None:
        """Nothing to do: ``horovod.spark.run`` tears the ranks down."""


class TorchCollective:
    """``torch.distributed`` from torchrun's environment (``RANK``, ``WORLD_SIZE``,
    ``LOCAL_RANK``, ``MASTER_ADDR``/``PORT``): NCCL on CUDA, Gloo on CPU, and
    ``DistributedDataParallel``, which overlaps the gradient all-reduce with backward."""

    def __init__(self) -> None:
        import torch
        import torch.distributed as dist

        self.local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        if torch.cuda.is_available():
            self._device = torch.device("cuda", self.local_rank)
            torch.cuda.set_device(self._device)
            dist.init_process_group("nccl", device_id=self._device)
        else:
            self._device = torch.device("cpu")
            dist.init_process_group("gloo")
        self._dist = dist
        self.rank, self.size = dist.get_rank(), dist.get_world_size()

    def _allreduce(self, tensor: torch.Tensor, op) -> torch.Tensor:
        tensor = tensor.to(self._device)
        self._dist.all_reduce(tensor, op=op)
        return tensor.cpu()

    def allreduce_sum(self, values: list[float]) -> list[float]:
        import torch

        return self._allreduce(torch.tensor(values, dtype=torch.float64), self._dist.ReduceOp.SUM).tolist()

    def allreduce_min(self, value: int) -> int:
        import torch

        return int(self._allreduce(torch.tensor(value), self._dist.ReduceOp.MIN))

    def distribute(self, model, optimizer):
        from torch.nn.parallel import DistributedDataParallel

        # One explicit broadcast of rank 0's parameters and buffers (init_sync=False stops
        # DDP from doing it again). No optimizer has state before its first step; a resumed
        # one loaded the same checkpoint file on every rank.
        for tensor in model.state_dict().values():
            self._dist.broadcast(tensor, src=0)
        device_ids = [self._device] if self._device.type == "cuda" else None
        return DistributedDataParallel(model, device_ids=device_ids, init_sync=False), optimizer

    def step(self, optimizer, parameters, max_norm):
        """DDP's gradients are averaged when backward returns."""
        clipped_step(optimizer, parameters, max_norm)

    def close(self) -> None:
        if self._dist.is_initialized():
            self._dist.destroy_process_group()
