"""Check a workflow declaration before it reaches a scheduler: ``make check WORKFLOW=<name>``.

For each workflow (``spark_jobs/workflows/<name>.toml``, default: every declared one), in
order, stopping at the first failure with one line that says what to change:

1. **declaration**: the TOML parses and every key is valid (the contract's parser, the one
   the DAG files and the jobs use);
2. **model**: ``[model] factory`` imports and builds the module;
3. **TorchScript**: its serving form scripts (the logged model loads without this package);
4. **forward pass**: a batch of rows (the workflow's sample rows, or every feature at its
   lower bound when it declares none) goes through the serving model and gives the shape
   ``[output]`` declares, with finite values;
5. **DAGs**: the DAG files generate the workflow's five DAGs with no import error.

    .venv/bin/python scripts/check_workflow.py [NAME ...]

Exit 0 when every check of every workflow passes, 1 otherwise.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
for _path in (REPO, REPO / "dags", REPO / "plugins"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

DAG_KINDS = ("nightly_retrain", "batch_scoring", "bulk_backfill_scoring", "score_on_new_champion", "train_on_demand")
SAMPLE_ROWS = 8


class CheckFailed(Exception):
    """One step failed: the message is the line to print."""


def one_line(err: BaseException) -> str:
    text = " ".join(str(err).split())
    return f"{type(err).__name__}: {text}" if text else type(err).__name__


def check_declaration(name: str):
    from spark_jobs import workflows

    try:
        return workflows.load(name)
    except workflows.WorkflowError as err:
        raise CheckFailed(f"{err} (fix spark_jobs/workflows/{name}.toml)") from err


def check_model(workflow):
    from spark_jobs import workflows

    try:
        return workflows.model_factory(workflow)()
    except Exception as err:
        raise CheckFailed(
            f"[model] factory {workflow.model.factory!r} did not build a module: {one_line(err)}"
        ) from err


def check_torchscript(workflow, net):
    from spark_jobs.serving import scripted_serving

    try:
        return scripted_serving(workflow, net.state_dict())
    except Exception as err:
        raise CheckFailed(
            f"the model does not script with TorchScript ({one_line(err)}): use tensor operations and "
            "literals in forward(), no Python globals, no data-dependent Python types"
        ) from err


def sample_features(workflow):
    import numpy as np

    from spark_jobs.sample_data import make_rows

    if workflow.sample is not None:
        return make_rows(workflow, "2026-01-01", SAMPLE_ROWS)[1]
    low = workflow.features.mins.reshape(workflow.features.shape)
    return np.broadcast_to(low, (SAMPLE_ROWS, *workflow.features.shape)).astype(workflow.features.numpy_dtype)


def check_forward(workflow, serving) -> None:
    import numpy as np
    import torch

    from spark_jobs.serving import output_shape

    try:
        features = np.ascontiguousarray(sample_features(workflow))
        with torch.no_grad():
            produced = serving(torch.from_numpy(features.copy()))
    except Exception as err:
        raise CheckFailed(f"the serving model failed on {SAMPLE_ROWS} rows: {one_line(err)}") from err
    declared = output_shape(workflow)
    if tuple(produced.shape[1:]) != tuple(declared[1:]) or len(produced) != SAMPLE_ROWS:
        raise CheckFailed(
            f"the model gives {tuple(produced.shape)} for {SAMPLE_ROWS} rows; [output] {workflow.output.kind} "
            f"declares {declared}: change the model's last layer or [output]"
        )
    if not torch.isfinite(produced).all():
        raise CheckFailed(f"the model gives non-finite values for {SAMPLE_ROWS} sample rows")


def check_dags(name: str) -> None:
    os.environ["ML_WORKFLOWS"] = name
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(REPO / "dags"))
    if bag.import_errors:
        path, error = next(iter(bag.import_errors.items()))
        last = [line for line in error.strip().splitlines() if line.strip()][-1]
        raise CheckFailed(f"{Path(path).name} does not import: {last.strip()}")
    missing = [f"{name}_{kind}" for kind in DAG_KINDS if f"{name}_{kind}" not in bag.dag_ids]
    if missing:
        raise CheckFailed(f"the DAG files did not generate {', '.join(missing)}")


def check(name: str, say: Callable[[str], None] = print) -> bool:
    """Every step for one workflow; prints a line per step; whether all passed."""
    steps: list[tuple[str, Callable[[], object]]] = []
    state: dict[str, object] = {}
    steps.append(("declaration", lambda: state.update(workflow=check_declaration(name))))
    steps.append(("model", lambda: state.update(net=check_model(state["workflow"]))))
    steps.append(("TorchScript", lambda: state.update(serving=check_torchscript(state["workflow"], state["net"]))))
    steps.append(("forward pass", lambda: check_forward(state["workflow"], state["serving"])))
    steps.append(("DAGs", lambda: check_dags(name)))
    for step, run in steps:
        try:
            run()
        except CheckFailed as failed:
            say(f"[check] {name}: {step}: FAILED: {failed}")
            return False
        say(f"[check] {name}: {step}: ok")
    return True


def main(argv: list[str] | None = None) -> int:
    from spark_jobs import workflows

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="workflows to check (default: every declared one)")
    args = parser.parse_args(argv)
    names = args.names or workflows.available()
    results = [check(name) for name in names]
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
