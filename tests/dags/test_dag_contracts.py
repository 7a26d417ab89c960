"""What the parsed DAGs promise, checked on the DAG objects Airflow builds (not their source):
scoring is gated on a validated champion, registrations run one at a time, params reach a
Spark job only as application arguments, and every param is typed and bounded."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pendulum
import pytest

from ml_platform.workflows import declared

SCORING_DAGS = {
    f"{workflow}_{dag}"
    for workflow in declared()
    for dag in ("nightly_retrain", "batch_scoring", "bulk_backfill_scoring", "score_on_new_champion")
}


def gates_of(dag) -> list:
    from ml_registry.operators import ModelRegistryGateOperator

    return [task for task in dag.tasks if isinstance(task, ModelRegistryGateOperator)]


def test_every_scoring_dag_gates_on_a_validated_champion(dagbag):
    gated = {dag_id for dag_id, dag in dagbag.dags.items() if gates_of(dag)}
    scoring = {dag_id for dag_id, dag in dagbag.dags.items() if any(t.task_id.startswith("score_") for t in dag.tasks)}
    assert gated == SCORING_DAGS | scoring
    for dag_id in gated:
        dag = dagbag.dags[dag_id]
        gates = gates_of(dag)
        for gate in gates:
            assert gate.required_tags == {"validation_status": "passed"}, (dag_id, gate.task_id)
            assert gate.alias == "champion", (dag_id, gate.task_id)
        for task in dag.tasks:
            if task.task_id.startswith("score_"):
                upstream = task.get_flat_relative_ids(upstream=True)
                assert {g.task_id for g in gates} & upstream, f"{dag_id}.{task.task_id} runs without a gate before it"


def test_every_registration_runs_in_the_registry_pool(dagbag):
    registers = [(dag_id, t) for dag_id, dag in dagbag.dags.items() for t in dag.tasks if t.task_id == "register_model"]
    assert registers
    for dag_id, task in registers:
        assert (task.pool, task.pool_slots) == ("ml_registry", 1), dag_id


# Text that would steer spark-submit or a shell if it reached one; each is tried where a
# param's schema accepts it (today none does: every string param is an enum or a date).
HOSTILE_STRINGS = (
    "--conf spark.x=y",
    "--conf=spark.driver.extraJavaOptions=-Dx=y",
    "--py-files /tmp/evil.zip",
    "a b c",
    'it\'s "quoted"',
    "$(id)",
    "`id`",
    "; id #",
    "{{ 7*7 }}",
    "1970-01-01",
    "2024-02-29",
    "9999-12-31",
)


def schema_types(schema: dict[str, Any]) -> set[str]:
    types = schema.get("type", [])
    return {types} if isinstance(types, str) else set(types)


def trigger_values(schema: dict[str, Any]) -> Iterator[Any]:
    """Candidate values at the edges of ``schema``: every enum value, both booleans, the numeric
    bounds, null, and hostile text (also at ``maxLength``); the caller keeps the valid ones."""
    if "enum" in schema:
        yield from schema["enum"]
        return
    types = schema_types(schema)
    if "null" in types:
        yield None
    if "boolean" in types:
        yield from (True, False)
    for kind in types & {"integer", "number"}:
        step = 1 if kind == "integer" else 1e-9
        yield from (schema[key] for key in ("minimum", "maximum") if key in schema)
        if "exclusiveMinimum" in schema:
            yield schema["exclusiveMinimum"] + step
        if "exclusiveMaximum" in schema:
            yield schema["exclusiveMaximum"] - step
    if "string" in types:
        yield from HOSTILE_STRINGS
        if "maxLength" in schema:
            yield (" ".join(HOSTILE_STRINGS) * schema["maxLength"])[: schema["maxLength"]]


def valid_trigger_values(schema: dict[str, Any]) -> list[Any]:
    from airflow.sdk.definitions.param import Param, ParamValidationError

    valid = []
    for value in trigger_values(schema):
        try:
            Param(schema=schema).resolve(value)
        except ParamValidationError:
            continue
        valid.append(value)
    return valid


# What these DAGs' tasks pull from upstream tasks (return values; both tasks below also push
# each key as its own XCom, multiple_outputs), as the running tasks would see it.
XCOMS = {
    "gate_model": {"name": "mnist_cnn", "version": "7", "uri": "models:/mnist_cnn/7", "alias": "champion"},
    "latest_partition": {"ds": "2026-11-28", "path": "/data/curated/mnist/ds=2026-11-28"},
}


def xcom_pull(task_ids=None, key="return_value", **_):
    value = XCOMS.get(task_ids)
    return value if key == "return_value" else value[key]


RUN_AT = pendulum.datetime(2026, 11, 29, 2, tz="UTC")
RUN_ID = f"manual__{RUN_AT.isoformat()}"


def render(dag, task, conf: dict[str, Any]) -> dict[str, Any]:
    """``task``'s template fields rendered for a run of ``dag`` triggered with ``conf``.

    Params are merged and validated by Airflow's own ``process_params`` (on copies: it
    resolves values into the Param objects it is given), and the context has what the task
    runner gives these templates; the task is a copy, so the parsed DAG stays as it was.
    """
    from airflow.sdk.definitions.param import process_params
    from airflow.sdk.execution_time.context import MacrosAccessor

    params = process_params(
        SimpleNamespace(params=copy.deepcopy(dag.params)),
        SimpleNamespace(params=copy.deepcopy(task.params)),
        conf,
        suppress_exception=False,
    )
    dag_run = SimpleNamespace(
        dag_id=dag.dag_id,
        run_id=RUN_ID,
        conf=conf,
        logical_date=RUN_AT,
        run_after=RUN_AT,
        data_interval_start=RUN_AT,
        data_interval_end=RUN_AT,
    )
    ti = SimpleNamespace(xcom_pull=xcom_pull)
    context = {
        "dag": dag,
        "task": task,
        "dag_run": dag_run,
        "run_id": RUN_ID,
        "logical_date": RUN_AT,
        "data_interval_start": RUN_AT,
        "data_interval_end": RUN_AT,
        "ds": RUN_AT.strftime("%Y-%m-%d"),
        "ts": RUN_AT.isoformat(),
        "ti": ti,
        "task_instance": ti,
        "macros": MacrosAccessor(),
        "params": params,
    }
    rendered = copy.deepcopy(task)
    rendered.render_template_fields(context, jinja_env=dag.get_template_env())
    return {field: getattr(rendered, field) for field in type(task).template_fields}


# spark-submit's own settings among the provider's template fields: a param in any of them
# would change how the job is launched, not what it is asked to do.
SPARK_SETTINGS = {
    "application",
    "conf",
    "files",
    "py_files",
    "jars",
    "driver_class_path",
    "packages",
    "exclude_packages",
    "keytab",
    "principal",
    "proxy_user",
    "name",
    "env_vars",
    "post_submit_commands",
    "properties_file",
}


def trigger_confs(dag) -> list[dict[str, Any]]:
    """Run confs to try: each param alone at each of its valid edge values, then all params at
    once (the n-th value of each, cycling)."""
    values = {name: valid_trigger_values(dag.params.get_param(name).schema) for name in dag.params}
    singles = [{name: value} for name, options in values.items() for value in options]
    widest = max(len(options) for options in values.values())
    together = [{name: opts[n % len(opts)] for name, opts in values.items() if opts} for n in range(widest)]
    return singles + together if len(values) > 1 else singles


def test_params_reach_spark_jobs_only_as_application_arguments(dagbag):
    from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

    checked, hostile_seen = 0, set()
    for dag_id, dag in dagbag.dags.items():
        if not dag.params:
            continue
        confs = trigger_confs(dag)
        for task in dag.tasks:
            if not isinstance(task, SparkSubmitOperator):
                continue
            settings = set(type(task).template_fields) - {"application_args"}
            assert SPARK_SETTINGS <= settings, f"{dag_id}.{task.task_id}: template fields {sorted(settings)}"
            default = render(dag, task, {})
            for conf in confs:
                rendered = render(dag, task, conf)
                where = f"{dag_id}.{task.task_id} with conf {conf!r}"
                for field in sorted(settings):
                    assert rendered[field] == default[field], f"{where}: {field} changed"
                # Settings equal to the defaults' render: no param value reached them. In the
                # arguments a string param is one whole argument: never split over several
                # (the count is fixed), never glued to others (`--conf=spark.x=<value>`).
                args, default_args = rendered["application_args"], default["application_args"]
                assert len(args) == len(default_args), f"{where}: argv {args}"
                for value in conf.values():
                    if not isinstance(value, str):
                        continue
                    pairs = zip(args, default_args, strict=True)
                    merged = [a for a, d in pairs if value in a and a != value and value not in d]
                    assert not merged, f"{where}: {value!r} is part of {merged}, not an argument of its own"
                    hostile_seen.update(value for arg in args if arg == value)
                checked += 1
    # Not vacuous: renders happened, and param text reached some job as a whole argument.
    assert checked and hostile_seen, (checked, hostile_seen)


def unbounded(schema: dict[str, Any]) -> list[str]:
    """What ``schema`` leaves open: no type, a number without both bounds, a string that no
    enum, checked format, pattern or maxLength limits."""
    from jsonschema import FormatChecker

    types = schema_types(schema)
    if not types:
        return ["no type"]
    if "enum" in schema:
        return []
    problems = []
    if types & {"integer", "number"}:
        if not {"minimum", "exclusiveMinimum"} & set(schema):
            problems.append("no minimum")
        if not {"maximum", "exclusiveMaximum"} & set(schema):
            problems.append("no maximum")
    if "string" in types:
        # A format jsonschema has no checker for (an unknown name; date-time or uri without
        # their optional packages) accepts any string.
        checked_format = schema.get("format") in FormatChecker().checkers
        if not (checked_format or "pattern" in schema or "maxLength" in schema):
            problems.append("a free string (no enum, checked format, pattern or maxLength)")
    return problems


def test_every_param_is_typed_and_bounded(dagbag):
    with_params = {dag_id: dag for dag_id, dag in dagbag.dags.items() if dag.params}
    assert {"mnist_train_on_demand", "mnist_batch_scoring", "mnist_bulk_backfill_scoring"} <= set(with_params)
    problems = {
        f"{dag_id}.{name}": unbounded(dag.params.get_param(name).schema)
        for dag_id, dag in with_params.items()
        for name in dag.params
    }
    assert {param: found for param, found in problems.items() if found} == {}


@pytest.mark.parametrize(
    ("schema", "problems"),
    [
        ({"type": "string"}, ["a free string (no enum, checked format, pattern or maxLength)"]),
        ({"type": "string", "format": "spark-conf"}, ["a free string (no enum, checked format, pattern or maxLength)"]),
        ({"type": ["null", "integer"], "minimum": 1}, ["no maximum"]),
        ({"default": 3}, ["no type"]),
        ({"type": "string", "maxLength": 64}, []),
        ({"type": "number", "exclusiveMinimum": 0, "maximum": 1}, []),
    ],
)
def test_unbounded_names_what_a_schema_leaves_open(schema, problems):
    assert unbounded(schema) == problems
