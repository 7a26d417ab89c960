"""The ``--py-files`` archive (scripts/package_jobs.py) built by several callers at once, as
two pytest-xdist workers (or a test run and ``make demo``) build ``build/spark_jobs.zip``:
every build succeeds and the archive is always a whole zip."""

from __future__ import annotations

import threading
import zipfile
from concurrent.futures import ThreadPoolExecutor

from package_jobs import package_jobs

CALLERS, ROUNDS = 6, 3


def test_concurrent_builds_of_one_archive_all_succeed(tmp_path):
    output = tmp_path / "build" / "spark_jobs.zip"
    start = threading.Barrier(CALLERS)

    def build(_: int) -> None:
        start.wait()  # all at once: each build's write overlaps the others'
        package_jobs(output)

    for _ in range(ROUNDS):
        with ThreadPoolExecutor(CALLERS) as pool:
            list(pool.map(build, range(CALLERS)))  # re-raises a failed build's error
        with zipfile.ZipFile(output) as archive:
            assert archive.testzip() is None
            assert "spark_jobs/__init__.py" in archive.namelist()
    assert [p.name for p in output.parent.iterdir()] == ["spark_jobs.zip"]  # no temporary file left
