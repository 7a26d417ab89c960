"""The scored rows' sample (``spark_jobs.row_sample``): per day the rows of smallest key,
the same whatever the tasks, batches and order they were scored in, and a task that ran
twice counted once. Spark's side (an accumulator filled by the scoring pass) is in
``test_model_and_scoring.py``."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from spark_jobs.row_sample import KEY, TaskSample, _ByTask, day_samples, smallest_keys

DAYS = ("2026-11-01", "2026-11-02", "2026-11-03")


def rows_of(keys: np.ndarray) -> dict[str, np.ndarray]:
    # Values are functions of the key, as statistics and predictions are of a row's content
    # (the key is its content hash): equal keys, equal rows.
    return {KEY: keys, "value": keys.astype(np.float64) / 7, "day_index": keys % 3}


@settings(max_examples=200, deadline=None)
@given(
    keys=st.lists(st.integers(-(2**63), 2**63 - 1) | st.integers(-5, 5), max_size=300),
    k=st.integers(1, 60),
    tasks=st.integers(1, 5),
    batch=st.integers(1, 50),
    seed=st.integers(0, 2**32 - 1),
)
def test_each_day_keeps_its_k_smallest_keys_however_the_rows_were_split(keys, k, tasks, batch, seed):
    keys = np.array(keys, dtype=np.int64)
    day_of = np.array(DAYS, dtype=object)[np.abs(keys) % 3] if len(keys) else np.array([], dtype=object)
    order = np.random.default_rng(seed).permutation(len(keys))
    param = _ByTask()
    gathered = param.zero({})
    for task, rows in enumerate(np.array_split(order, tasks)):
        sample = TaskSample(k)
        for first in range(0, len(rows), batch):
            part = rows[first : first + batch]
            sample.add(day_of[part], rows_of(keys[part]))
        gathered = param.addInPlace(gathered, sample.rows(task))
    got = day_samples(gathered, k)

    assert set(got) == set(day_of.tolist())
    for ds, day in got.items():
        wanted = np.sort(keys[day_of == ds])[:k]
        np.testing.assert_array_equal(day[KEY], wanted)
        np.testing.assert_array_equal(day["value"], wanted.astype(np.float64) / 7)
        np.testing.assert_array_equal(day["day_index"], wanted % 3)


def test_a_task_that_ran_again_replaces_its_rows():
    param = _ByTask()
    first, again = TaskSample(10), TaskSample(10)
    for sample in (first, again):
        sample.add(np.array([DAYS[0]] * 4, dtype=object), rows_of(np.array([4, 1, 3, 2])))
    other = TaskSample(10)
    other.add(np.array([DAYS[0]] * 2, dtype=object), rows_of(np.array([9, 0])))
    gathered = param.addInPlace(param.addInPlace(param.addInPlace({}, first.rows(0)), other.rows(1)), again.rows(0))
    np.testing.assert_array_equal(day_samples(gathered, 10)[DAYS[0]][KEY], [0, 1, 2, 3, 4, 9])


def test_smallest_keys_break_ties_by_position():
    rows = {KEY: np.array([5, 1, 5, 0, 5]), "at": np.arange(5)}
    kept = smallest_keys(rows, 3)
    np.testing.assert_array_equal(kept[KEY], [0, 1, 5])
    np.testing.assert_array_equal(kept["at"], [3, 1, 0])
