"""Training checkpoints on a local folder: what a retry resumes from, and what a finished
run leaves behind (nothing: a cleared successful run must train again, not resume at its
last epoch and register the old weights as a new version)."""

from __future__ import annotations

import pytest

from spark_jobs.training.checkpoints import Checkpoints


@pytest.fixture
def store(tmp_path) -> Checkpoints:
    return Checkpoints(str(tmp_path / "ml_nightly_retrain" / "run-1"))


def test_the_latest_checkpoint_is_kept_and_resumed_from(store):
    assert store.latest_epoch() == 0
    for epoch in (1, 2):
        store.save(epoch, {"epoch": epoch, "history": list(range(1, epoch + 1))})
    assert store.epochs() == [2]
    assert Checkpoints(store.url).load(2) == {"epoch": 2, "history": [1, 2]}


def test_remove_all_leaves_nothing_to_resume_from(store, tmp_path):
    store.save(1, {"epoch": 1})
    store.save(2, {"epoch": 2})
    # What a try killed while writing leaves beside the checkpoints.
    store.fs.pipe_file(f"{store.root}/epoch-0003.pt.partial", b"half a checkpoint")

    store.remove_all()

    assert Checkpoints(store.url).latest_epoch() == 0
    assert not (tmp_path / "ml_nightly_retrain" / "run-1").exists()
    assert (tmp_path / "ml_nightly_retrain").is_dir()  # other runs' folders are not touched


def test_remove_all_without_checkpoints_is_a_no_op(store):
    store.remove_all()
    assert store.latest_epoch() == 0


def test_remove_all_removes_only_checkpoint_files(store, tmp_path):
    """A folder given by hand may hold other files (or be a container's root): they stay."""
    store.save(1, {"epoch": 1})
    store.fs.pipe_file(f"{store.root}/notes.txt", b"not ours")
    assert store.remove_all() == [1]
    assert store.latest_epoch() == 0
    assert store.fs.ls(store.root, detail=False) == [f"{store.root}/notes.txt"]
