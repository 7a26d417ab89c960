"""Workflows: what differs between the models this package trains, declared once per model.

A workflow is one TOML file in this folder (``<name>.toml``) beside its model module
(``<name>.py``). The keys, their types, allowed values and checks are the contract's
(:mod:`ml_contract.workflows`, imported by the DAGs too, and re-exported here); this module
finds and loads declarations (from the folder, or from the jobs' ``--py-files`` archive) and
resolves the callables they name (``[model] factory``, ``[dataset] sample``).

This module imports neither Spark nor torch: the jobs' argument parsing reads workflows cheaply.
"""

from __future__ import annotations

import tomllib
from functools import cache
from pathlib import Path

from ml_contract.workflows import *  # noqa: F403 - the declaration's schema, re-exported
from ml_contract.workflows import NAME, Workflow, WorkflowError, parse_workflow

WORKFLOWS_DIR = Path(__file__).resolve().parent


def _resolve(workflow: Workflow, key: str, target: str):
    import importlib

    module_name, _, attr = target.partition(":")
    try:
        return getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError, ValueError) as err:
        raise WorkflowError(f"workflow {workflow.name}: {key} {target!r}: {err}") from err


def model_factory(workflow: Workflow):
    """The callable named by ``[model] factory`` (imports the workflow's model module)."""
    return _resolve(workflow, "[model] factory", workflow.model.factory)


def sample_factory(workflow: Workflow):
    """The callable named by ``[dataset] sample``."""
    if workflow.sample is None:
        raise WorkflowError(f"workflow {workflow.name} declares no sample data ([dataset] sample)")
    return _resolve(workflow, "[dataset] sample", workflow.sample)


def available() -> list[str]:
    """The names of the workflows declared in this folder."""
    from importlib import resources

    # Through importlib.resources: the package may run from the --py-files zip.
    return sorted(f.name.removesuffix(".toml") for f in resources.files(__name__).iterdir() if f.name.endswith(".toml"))


@cache
def load(name: str) -> Workflow:
    """The workflow declared in ``<name>.toml`` here (inside the jobs' zip archive too)."""
    if not isinstance(name, str) or not NAME.match(name):
        raise WorkflowError(f"workflow name {name!r} must match {NAME.pattern}")
    try:
        text = _read_declaration(name)
    except FileNotFoundError:
        raise WorkflowError(f"no workflow {name!r}: declared are {', '.join(available()) or 'none'}") from None
    workflow = parse_workflow(tomllib.loads(text), f"workflow {name}.toml")
    if workflow.name != name:
        raise WorkflowError(f"workflow {name}.toml declares name {workflow.name!r}")
    return workflow


def _read_declaration(name: str) -> str:
    """The TOML text, from the folder or, when the package runs from ``--py-files``, the zip."""
    from importlib import resources

    return resources.files(__name__).joinpath(f"{name}.toml").read_text(encoding="utf-8")
