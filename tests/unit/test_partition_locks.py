"""Partition locks: one writer per (dataset, ds), all-or-nothing claims, stale locks broken once."""

from __future__ import annotations

import threading
from pathlib import Path

from ml_platform.partition_locks import UNKNOWN, Holder, lock_names, release, try_claim

A = Holder("mnist_nightly_retrain", "scheduled__2026-11-29T02:00:00+00:00", "claim_curated")
B = Holder("mnist_batch_scoring", "scheduled__2026-11-28T00:00:00+00:00", "claim_curated")
DAY = lock_names(["curated"], ["2026-11-28"])


def live(_holder: Holder) -> bool:
    return True


def test_a_second_writer_waits_until_the_first_releases(tmp_path: Path):
    assert try_claim(tmp_path, DAY, A, live) == []
    assert try_claim(tmp_path, DAY, B, live) == [(DAY[0], A)]
    assert release(tmp_path, DAY, B) == 0  # not B's to release
    assert release(tmp_path, DAY, A) == 1
    assert try_claim(tmp_path, DAY, B, live) == []


def test_other_days_and_datasets_do_not_wait(tmp_path: Path):
    assert try_claim(tmp_path, DAY, A, live) == []
    assert try_claim(tmp_path, lock_names(["curated"], ["2026-11-27"]), B, live) == []
    assert try_claim(tmp_path, lock_names(["predictions"], ["2026-11-28"]), B, live) == []


def test_a_claim_is_all_or_nothing_and_repeatable_by_its_holder(tmp_path: Path):
    week = lock_names(["predictions"], [f"2026-11-0{d}" for d in range(1, 8)])
    assert try_claim(tmp_path, [week[3]], A, live) == []
    assert try_claim(tmp_path, week, B, live) == [(week[3], A)]
    assert sorted(p.name for p in tmp_path.rglob("*.lock")) == ["ds=2026-11-04.lock"]  # B kept nothing
    assert try_claim(tmp_path, [week[3]], A, live) == []  # a retried claim of the same run
    assert lock_names(["b", "a"], ["2", "1", "2"]) == ["a/ds=1.lock", "a/ds=2.lock", "b/ds=1.lock", "b/ds=2.lock"]


def test_a_lock_whose_run_has_ended_is_broken_and_its_late_release_is_harmless(tmp_path: Path):
    assert try_claim(tmp_path, DAY, A, live) == []
    assert try_claim(tmp_path, DAY, B, lambda holder: holder != A) == []
    assert release(tmp_path, DAY, A) == 0
    assert try_claim(tmp_path, DAY, A, live) == [(DAY[0], B)]


def test_an_unreadable_lock_is_held_not_broken(tmp_path: Path):
    (tmp_path / "curated").mkdir()
    (tmp_path / DAY[0]).write_text("")  # created, content not written yet
    assert try_claim(tmp_path, DAY, B, lambda holder: False) == [(DAY[0], UNKNOWN)]
    assert (tmp_path / DAY[0]).exists()


def test_many_claimers_of_a_stale_lock_one_wins(tmp_path: Path):
    """Every claimer sees the stale holder and tries to break it at the same moment."""
    stale = Holder("mnist_batch_scoring", "manual__killed", "claim_predictions")
    names = lock_names(["predictions"], ["2026-11-28"])
    assert try_claim(tmp_path, names, stale, live) == []
    claimers = [Holder("mnist_score_on_new_champion", f"run-{n}", "claim_predictions") for n in range(16)]
    start, results = threading.Barrier(len(claimers)), {}

    def claim(holder: Holder) -> None:
        start.wait()
        results[holder] = try_claim(tmp_path, names, holder, lambda other: other != stale)

    threads = [threading.Thread(target=claim, args=(h,)) for h in claimers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    winners = [h for h, busy in results.items() if not busy]
    assert len(winners) == 1
    # The others wait: on the winner (UNKNOWN while its new lock is not yet written), or on
    # the stale holder while the break is under way.
    assert all(busy and busy[0][1] in (winners[0], UNKNOWN, stale) for h, busy in results.items() if h not in winners)
    assert Holder.from_text((tmp_path / names[0]).read_text()) == winners[0]
