"""Command lines of the Spark jobs, built in one place for the DAGs' tasks, the tests and the
benchmarks (which import this module: it imports nothing of Airflow). The jobs' own
``argparse`` (``spark_jobs/<job>.py``) is the other side of each contract."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any


@dataclass(frozen=True)
class TrainArguments:
    """``spark_jobs/entrypoints/train.py``'s arguments. A value may be a template or an
    upstream task's output (rendered when the task runs); None leaves an option to the
    job's default (the workflow's ``[model.training]``, one rank per Spark slot)."""

    workflow: Any
    curated_root: Any
    start_ds: Any
    end_ds: Any
    work_dir: Any
    output_manifest: Any
    experiment_name: Any
    epochs: Any = None
    learning_rate: Any = None
    batch_size: Any = None
    num_ranks: Any = None
    backend: Any = None
    holdout_pct: Any = None
    split_seed: Any = None
    seed: Any = None  # the ranks' initial weights and shuffles (default: the job's)
    checkpoint_dir: Any = None
    bind_cores: Any = None  # "on" | "off"
    tags: Sequence[str] = ()

    def argv(self) -> list[Any]:
        """``--option value`` pairs (field ``work_dir`` is ``--work-dir``), then one
        ``--tag KEY=VALUE`` per tag; paths and numbers as text, anything else as it is."""
        argv: list[Any] = []
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name != "tags" and value is not None:
                argv += [f"--{f.name.replace('_', '-')}", as_argument(value)]
        for tag in self.tags:
            argv += ["--tag", tag]
        return argv


def as_argument(value: Any) -> Any:
    """Numbers and paths as text; strings and upstream outputs (XComArgs) unchanged."""
    if isinstance(value, (int, float)) or hasattr(value, "__fspath__"):
        return str(value)
    return value
