"""Parse time of DAG files with Airflow's own DagBag; run in the stack's environment.

    python -m benchmarks.parse_dags --repeats 5 dags/nightly_retrain.py ...

Prints ``{"<file>": {"cold": [s, ...], "cold_cpu": [s, ...], "warm": [s, ...]}}`` as JSON
on its last line.

- **cold**: like Airflow 3's DAG processor, which parses each file in a child forked from a
  process that has imported Airflow (its DAG processor manager and file processor) and,
  before forking, the ``airflow.*`` modules the file imports (``[dag_processor]
  parsing_pre_import_modules``, on by default): the child pays for the file's other imports
  (``ml_platform``, the plugins) and its code.
- **cold_cpu**: the CPU seconds of those cold parses (the child's user + system time): the
  parse's cost to the DAG processor, less inflated on a machine busy with other work than
  the wall time, which also counts the waits for a core.
- **warm**: the file parsed again in a process that has parsed it before (the DAG
  integrity test's figure): only the file's own code runs.
"""

from __future__ import annotations

import argparse
import json
import os
import time


def _parse(dag_file: str) -> tuple[float, float]:
    """Wall and CPU seconds of one parse of ``dag_file`` with a DagBag."""
    from airflow.dag_processing.dagbag import DagBag

    started, started_cpu = time.perf_counter(), time.process_time()
    bag = DagBag(dag_folder=dag_file)
    seconds, cpu_seconds = time.perf_counter() - started, time.process_time() - started_cpu
    if bag.import_errors or not bag.dag_ids:
        raise RuntimeError(f"{dag_file}: no DAG or import errors {bag.import_errors}")
    return seconds, cpu_seconds


def cold_seconds(dag_file: str) -> tuple[float, float]:
    """Parse ``dag_file`` in a forked child; its wall and CPU seconds, or the child's error."""
    import importlib

    from airflow.utils.file import iter_airflow_imports

    for module in iter_airflow_imports(dag_file):  # what the DAG processor pre-imports
        importlib.import_module(module)
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: parse, report, leave without running any exit handlers
        os.close(read_end)
        try:
            message = {"seconds": _parse(dag_file)}  # [wall, cpu]
        except Exception as err:  # handed to the parent, which raises it
            message = {"error": str(err)}
        os.write(write_end, json.dumps(message).encode())
        os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end) as pipe:
        message = json.loads(pipe.read() or '{"error": "the child died"}')
    os.waitpid(pid, 0)
    if "error" in message:
        raise RuntimeError(message["error"])
    wall, cpu = message["seconds"]
    return wall, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("dag_files", nargs="+")
    args = parser.parse_args()
    # The DAG processor forks each file's parse from its manager process, which has imported
    # the manager and the file processor (and with them the modules they use); without these
    # the first file measured here paid for them (batch_scoring.py: 0.37 CPU s alone, 0.15 s
    # after another file).
    import airflow.dag_processing.manager  # noqa: F401
    import airflow.dag_processing.processor  # noqa: F401
    from airflow.dag_processing.dagbag import DagBag  # noqa: F401

    times = {}
    for f in args.dag_files:
        cold = [cold_seconds(f) for _ in range(args.repeats)]
        times[f] = {"cold": [wall for wall, _ in cold], "cold_cpu": [cpu for _, cpu in cold]}
    for f in args.dag_files:
        _parse(f)
        times[f]["warm"] = [_parse(f)[0] for _ in range(args.repeats)]
    print(json.dumps(times))


if __name__ == "__main__":
    main()
