"""Daily raw CSV drops of a workflow, generated offline from its sample data.

There is no internet at run time: each workflow declares a generator of realistic rows
(``[dataset] sample`` in its TOML; MNIST's upscales scikit-learn's bundled 8x8 digits,
diabetes jitters scikit-learn's bundled patients), deterministic for a (seed, ds) pair.
With augmentation any number of distinct rows can be made, for scale tests; without it,
rows are the bundled ones themselves. A drop is one CSV file,
``<out>/ds=<ds>/<workflow>.csv``, with the workflow's raw fields as its header: integers as
integers, floats with the fewest digits that read back as the same ``float32``, so ingest
curates exactly the generated values.

    python -m spark_jobs.sample_data --workflow mnist --ds 2026-11-28 --rows 5000 --out var/data/raw/mnist

``--workflow`` defaults to ``mnist`` (the demo's), on the command line only.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import numpy as np

from ml_contract.layout import partition_path
from spark_jobs import workflows
from spark_jobs.workflows import Workflow

CLI_DEFAULT_WORKFLOW = "mnist"


def _workflow(workflow: Workflow | str) -> Workflow:
    return workflows.load(workflow) if isinstance(workflow, str) else workflow


def make_rows(
    workflow: Workflow | str, ds: str, rows: int, *, seed: int = 0, augment: bool = True
) -> tuple[np.ndarray, np.ndarray]:
    """``rows`` of ``workflow``'s sample data for day ``ds``: (labels [rows] in the label's
    dtype, features [rows, *shape] in the features' dtype), the same for the same inputs."""
    wf = _workflow(workflow)
    labels, features = workflows.sample_factory(wf)(ds, rows, seed=seed, augment=augment)
    layout = wf.features
    features = np.asarray(features)
    if len(labels) != rows or features.shape[:1] != (rows,) or features.size != rows * layout.size:
        raise ValueError(
            f"workflow {wf.name}: {wf.sample} gave labels {np.shape(labels)} and features {features.shape}, "
            f"expected [{rows}] and [{rows}, {', '.join(map(str, layout.shape))}]"
        )
    labels = np.asarray(labels).astype(np.dtype(wf.label.dtype), copy=False)
    features = features.reshape(rows, *layout.shape).astype(layout.numpy_dtype, copy=False)
    return labels, features


def _float_texts(values: np.ndarray) -> np.ndarray:
    """Each float32 value as the shortest text that reads back as the same float32 through
    a double (how Spark parses it: decimal -> double -> float32), as strings."""
    texts = []
    for value in np.asarray(values, dtype=np.float32).ravel():
        text = np.format_float_positional(value, unique=True, trim="-")
        if np.float32(float(text)) != value:  # a double rounding on the way: write the exact double
            text = repr(float(value))
        texts.append(text)
    return np.array(texts, dtype=object).reshape(np.shape(values))


def csv_lines(workflow: Workflow | str, labels: np.ndarray, features: np.ndarray) -> list[str]:
    """Raw CSV lines (no header) of ``labels`` and ``features`` in ``workflow``'s fields."""
    wf = _workflow(workflow)
    flat = np.asarray(features).reshape(len(labels), -1)
    columns = [
        _float_texts(labels) if wf.label.dtype.startswith("float") else np.asarray(labels).astype(np.int64),
        *(
            [_float_texts(flat[:, i]) for i in range(flat.shape[1])]
            if not wf.features.is_integer
            else [flat.astype(np.int64)]
        ),
    ]
    cells = np.column_stack([c.reshape(len(labels), -1) for c in columns]).astype(str)
    return [",".join(row) for row in cells]


def write_drop(
    workflow: Workflow | str, out_dir: Path, ds: str, rows: int, *, seed: int = 0, augment: bool = True
) -> Path:
    """Write ``<out_dir>/ds=<ds>/<workflow>.csv`` (header: the workflow's raw fields)
    atomically; return its path."""
    wf = _workflow(workflow)
    labels, features = make_rows(wf, ds, rows, seed=seed, augment=augment)
    target_dir = Path(partition_path(out_dir, ds))
    target_dir.mkdir(parents=True, exist_ok=True)
    target = target_dir / f"{wf.name}.csv"
    tmp = target_dir / f".{wf.name}.csv.tmp"
    header = ",".join(wf.raw_fields)
    if wf.features.is_integer and not wf.label.dtype.startswith("float"):
        # The fast path for image-sized rows (MNIST: 785 integers a line).
        table = np.column_stack([labels, features.reshape(rows, -1)]).astype(np.int64)
        np.savetxt(tmp, table, fmt="%d", delimiter=",", header=header, comments="")
    else:
        tmp.write_text("\n".join([header, *csv_lines(wf, labels, features)]) + "\n")
    os.replace(tmp, target)
    return target


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--workflow",
        default=CLI_DEFAULT_WORKFLOW,
        help=f"the workflow whose rows to write ({', '.join(workflows.available())}; default {CLI_DEFAULT_WORKFLOW})",
    )
    parser.add_argument("--ds", action="append", required=True, help="day YYYY-MM-DD (repeatable)")
    parser.add_argument("--rows", type=int, default=5000, help="rows per day (default 5000)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-augment", dest="augment", action="store_false")
    parser.add_argument("--out", type=Path, required=True, help="raw drop root (the workflow's raw dataset)")
    args = parser.parse_args(argv)
    try:
        workflow = workflows.load(args.workflow)
    except workflows.WorkflowError as err:
        parser.error(str(err))
    for ds in args.ds:
        path = write_drop(workflow, args.out, ds, args.rows, seed=args.seed, augment=args.augment)
        print(f"wrote {args.rows} rows to {path}")


if __name__ == "__main__":
    main()
