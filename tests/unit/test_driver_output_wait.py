"""``spark_jobs.driver_output``: how much of a pipe is unread, and the exit-time wait for a
reader (the spark-submit side is tests/faults/test_driver_output.py)."""

from __future__ import annotations

import os
import threading
import time

from spark_jobs.driver_output import unread_bytes, wait_until_output_read


def test_unread_bytes_counts_what_the_reader_has_not_taken_and_ignores_files(tmp_path):
    read_end, write_end = os.pipe()
    try:
        assert unread_bytes(write_end) == 0
        os.write(write_end, b"twelve bytes")
        assert unread_bytes(write_end) == 12
        os.read(read_end, 5)
        assert unread_bytes(write_end) == 7
    finally:
        os.close(read_end)
        os.close(write_end)
    with open(tmp_path / "log", "w") as file:
        assert unread_bytes(file.fileno()) is None  # a file loses nothing: no wait


def test_the_wait_ends_once_a_late_reader_has_read_everything_and_gives_up_without_one():
    read_end, write_end = os.pipe()
    try:
        os.write(write_end, b"x" * 1000)
        started = time.monotonic()
        assert wait_until_output_read(timeout=0.3, fds=(write_end,)) is False  # nobody reads
        assert 0.3 <= time.monotonic() - started < 2

        reader = threading.Timer(0.5, lambda: os.read(read_end, 4096))
        reader.start()
        started = time.monotonic()
        assert wait_until_output_read(timeout=10, fds=(write_end,)) is True
        assert 0.4 <= time.monotonic() - started < 5  # until the reader came, not the timeout
        reader.join()
    finally:
        os.close(read_end)
        os.close(write_end)
