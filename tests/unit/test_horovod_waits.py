"""How a Horovod rank waits for a collective operation: polling with sleeps, never in
Horovod 0.28's own ``synchronize`` while the operation is still running (it spins on
``std::this_thread::yield()``: two ranks on 2 cores, one waiting 2 s for the other, spent
2.27 CPU s in that wait, 1.15 s with the sleeping poll, the rest being Horovod's background
thread). Horovod's module is a stand-in here that records the calls: the real ranks run in
``test_train_backends.py`` and ``test_training_loop.py``."""

from __future__ import annotations

import time
from types import SimpleNamespace

from spark_jobs.training import collectives


class RecordingHorovod:
    """``poll`` answers False ``pending`` times per handle, then True; ``synchronize``
    records whether its handle was done when called."""

    def __init__(self, pending: int) -> None:
        self.pending, self.polls, self.synchronized = pending, {}, []

    def poll(self, handle: int) -> bool:
        self.polls[handle] = self.polls.get(handle, 0) + 1
        return self.polls[handle] > self.pending

    def synchronize(self, handle: int) -> str:
        self.synchronized.append((handle, self.polls.get(handle, 0) > self.pending))
        return f"result {handle}"


def collective_on(hvd: RecordingHorovod) -> collectives.HorovodCollective:
    collective = object.__new__(collectives.HorovodCollective)  # no hvd.init: no ranks here
    collective._hvd = hvd
    return collective


def test_wait_sleeps_between_polls_and_synchronizes_only_a_finished_operation(monkeypatch):
    sleeps: list[float] = []
    monkeypatch.setattr(time, "sleep", sleeps.append)
    hvd = RecordingHorovod(pending=5)
    assert collective_on(hvd).wait(7) == "result 7"
    assert hvd.polls == {7: 6} and len(sleeps) == 5
    assert hvd.synchronized == [(7, True)]


def test_the_sleeps_between_polls_grow_to_a_bound_and_start_short_for_each_operation(monkeypatch):
    """A long wait polls at most every HOROVOD_POLL_MAX_S; the next operation's first poll
    comes after HOROVOD_POLL_S again, not after the last wait's longest sleep."""
    sleeps: list[float] = []
    monkeypatch.setattr(time, "sleep", sleeps.append)
    hvd = RecordingHorovod(pending=8)
    collective = collective_on(hvd)
    collective.wait(1)
    first, short, longest = sleeps[:], collectives.HOROVOD_POLL_S, collectives.HOROVOD_POLL_MAX_S
    assert first[0] == short and first[-1] == longest and max(first) == longest
    assert all(later >= earlier for earlier, later in zip(first, first[1:], strict=False))
    assert first[:3] == [short, 2 * short, 4 * short]
    sleeps.clear()
    collective.wait(2)
    assert sleeps == first


def test_a_step_waits_for_every_pending_gradient_before_the_optimizer_synchronizes(monkeypatch):
    monkeypatch.setattr(time, "sleep", lambda _: None)
    hvd = RecordingHorovod(pending=3)
    done_when_stepped = []

    class Optimizer(SimpleNamespace):
        def step(self):
            done_when_stepped.append({h: hvd.polls.get(h, 0) > hvd.pending for h in (1, 2)})

    # The gradient hooks' handles: two started all-reduces and a parameter whose hook has
    # not run (None: the optimizer's synchronize starts it itself).
    optimizer = Optimizer(_handles={"a": (1, None), "b": (2, None), "c": (None, None)})
    collective_on(hvd).step(optimizer, [], max_norm=0.0)
    assert done_when_stepped == [{1: True, 2: True}]
