"""The platform's UIs in a real browser: Playwright driving Debian's Chromium, headless,
against the Airflow and MLflow that ``make up`` starts (``scripts/platform_stack.py`` on a
state folder and free ports of the tests' own: the platform of ``conftest.py``).

What a person sees: the sign-in page (Airflow asks for the login ``make up`` prints); the
DAG list and each DAG's description; the trigger form of
``mnist_train_on_demand`` with every Param's title, description, default and allowed
values, refusing an out-of-range value; a run triggered from that form; and in MLflow, the
experiment opening on the training runs (the on-demand flow's, ``promoted_run``) and the
run page with the loss and validation curves and the confusion matrix. Every test saves its
screenshots as PNG files under ``var/screenshots/<test>/`` (printed as they are written).

MLflow 3.17's UI shows an experiment in its GenAI or its model-training view by a setting
of the browser (the "GenAI | Model training" switch, remembered in local storage, GenAI on a
first visit), which a link selects with ``workflowType=machine_learning``; the experiment's
own kind (tag ``mlflow.experimentKind``, set by the train job) is model training too.
"""

from __future__ import annotations

import json
import re
import shutil
import urllib.error
import urllib.request

import pytest
from platform_support import (
    CURATED_DS,
    DAYS,
    MODEL,
    ON_DEMAND,
    ON_NEW_CHAMPION,
    SCREENSHOTS,
    expect,
    new_page,
    output,
)

from local_stack import REPO, wait_until
from spark_jobs import workflows

DS = CURATED_DS  # the curated day the platform has (conftest.py)
WINDOW = f"{DAYS[0]}..{DAYS[-1]}"  # the curated window the platform's on-demand flow trains on
# What the form is filled with for the run it triggers: small, quick, no promotion.
TYPED = {"epochs": "3", "window_days": "1", "end_ds": DS}
# MLflow links that open the model-training view (see the module docstring).
ML_VIEW = "workflowType=machine_learning"


@pytest.fixture(scope="module")
def platform(shared_platform):
    """The platform, up, its DAGs parsed."""
    cli, up = shared_platform
    assert up.returncode == 0, output(up)
    wait_until(lambda: cli.api("GET", "/dags?limit=100")["total_entries"] >= 10, 180, 3, "the DAGs parsed")
    return cli


def refused_status(url: str, body: dict | None = None) -> int | None:
    """The HTTP status of an error answer to a request without any token (None if it succeeded)."""
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        urllib.request.urlopen(request, timeout=30).close()
    except urllib.error.HTTPError as err:
        return err.code
    return None


def test_the_platform_asks_for_a_login(shared_platform, platform, browser, screenshot):
    """``make up`` prints the login and writes it, owner-only, to ``var/platform.env``. Without
    it the REST API answers 401 (also a trigger with an undeclared key: the refusal that would
    name the DAG's params is not given to an anonymous caller), a wrong password gets no token,
    and the UI shows its sign-in page, where that password opens the DAG list."""
    _, up = shared_platform
    user, password = platform.login()
    assert f"(user {user}, password {password})" in up.stdout, output(up)
    assert (platform.state / "platform.env").stat().st_mode & 0o777 == 0o600
    api = f"{platform.record['airflow_url']}/api/v2"
    assert refused_status(f"{api}/dags") == 401
    assert refused_status(f"{api}/dags/{ON_DEMAND}/dagRuns", {"logical_date": None, "conf": {"jars": "x"}}) == 401
    wrong = {"username": user, "password": password + "x"}
    assert refused_status(f"{platform.record['airflow_url']}/auth/token", wrong) == 401

    page = new_page(browser)  # not signed in
    try:
        page.goto(f"{platform.record['airflow_url']}/dags")
        page.get_by_label("Username").fill(user)
        page.get_by_label("Password").fill(password)
        screenshot(page, "sign-in")
        page.get_by_role("button", name="Sign in").click()
        page.get_by_label("Show table view").click()
        expect(page.get_by_role("link", name=ON_DEMAND, exact=True)).to_be_visible()
        screenshot(page, "signed-in")
    finally:
        page.context.close()


def open_trigger_form(page, airflow_url: str):
    page.goto(f"{airflow_url}/dags/{ON_DEMAND}")
    page.get_by_role("button", name="Trigger Dag").click()
    dialog = page.get_by_role("dialog")
    expect(dialog.get_by_text("Run Parameters")).to_be_visible()
    return dialog


def test_the_dag_list_shows_every_dag_and_each_dags_description(platform, page, screenshot):
    """Airflow 3.3's DAG list (cards or table) has no description column: the list shows
    every DAG, and each DAG's Details tab its description; its docs open from the DAG page."""
    url = platform.record["airflow_url"]
    dags = platform.api("GET", "/dags?limit=100")["dags"]
    described = [(d["dag_id"], d["description"]) for d in dags]
    kinds = len(list((REPO / "dags").glob("*.py")))  # each DAG file builds one DAG per workflow
    assert len(dags) == kinds * len(workflows.available()) and all(d["description"] for d in dags), described
    page.goto(f"{url}/dags")
    page.get_by_label("Show table view").click()
    expect(page.get_by_text(f"{len(dags)} Dags")).to_be_visible()
    for dag in dags:
        expect(page.get_by_role("link", name=dag["dag_id"], exact=True)).to_be_visible()
    screenshot(page, "dag-list", full_page=True)

    for dag in dags:
        page.goto(f"{url}/dags/{dag['dag_id']}/details")
        expect(page.get_by_role("cell", name=dag["description"], exact=True)).to_be_visible()
        if dag["dag_id"] == ON_DEMAND:
            screenshot(page, "dag-details")
    page.get_by_role("button", name="Dag Docs").click()
    expect(
        page.get_by_role("dialog").get_by_role("heading", name="On-demand training with typed parameters")
    ).to_be_visible()
    screenshot(page, "dag-docs")


def test_the_trigger_form_shows_every_param_and_refuses_out_of_range_values(platform, page, screenshot):
    params = platform.api("GET", f"/dags/{ON_DEMAND}/details")["params"]
    assert len(params) == 8
    dialog = open_trigger_form(page, platform.record["airflow_url"])
    for name, param in params.items():
        schema, title = param["schema"], param["schema"]["title"]
        expect(dialog.get_by_text(title).first).to_be_visible()  # its label (with a required marker)
        if param["description"]:
            expect(dialog.get_by_text(param["description"], exact=True)).to_be_visible()
        if schema["type"] in ("integer", "number"):
            field = dialog.get_by_role("spinbutton", name=title, exact=True)
            expect(field).to_have_value(str(param["value"]))
            # The bounds the form enforces, as the spin button announces them.
            assert float(field.get_attribute("aria-valuemin")) == schema["minimum"], name
            assert float(field.get_attribute("aria-valuemax")) == schema["maximum"], name
        elif schema["type"] == "boolean":
            expect(dialog.get_by_role("checkbox", name=title, exact=True)).to_be_checked(checked=param["value"])
        elif "enum" in schema:
            expect(dialog.get_by_role("combobox", name=title, exact=True)).to_be_visible()
            expect(dialog.locator(f"[name='element_{name}']")).to_have_value(param["value"])  # the select's value
        else:  # the window's last day: a date picker, empty by default
            assert schema["format"] == "date"
            field = dialog.locator(f"[name='element_{name}']")
            expect(field).to_have_attribute("type", "date")
            expect(field).to_have_value("")
    screenshot(page, "trigger-form", full_page=True)

    backend = params["backend"]
    dialog.get_by_role("combobox", name=backend["schema"]["title"], exact=True).click()
    options = page.get_by_role("option")
    expect(options).to_have_text(backend["schema"]["enum"])
    screenshot(page, "backend-choices")
    options.filter(has_text=backend["value"]).click()  # closes the list, keeping the default
    expect(options).to_have_count(0)

    # Out of range: the form does not keep the typed value, it puts the bound in its place.
    learning_rate = dialog.get_by_role("spinbutton", name="Learning rate", exact=True)
    learning_rate.fill("0")
    learning_rate.blur()
    expect(learning_rate).to_have_value("0.000001")
    epochs = dialog.get_by_role("spinbutton", name="Epochs", exact=True)
    epochs.fill("1000")
    epochs.blur()
    expect(epochs).to_have_value(str(params["epochs"]["schema"]["maximum"]))
    screenshot(page, "out-of-range-refused", full_page=True)


@pytest.fixture(scope="module")
def form_triggered_run(platform, browser):
    """A run of ``mnist_train_on_demand`` triggered from the UI form (small, no promotion),
    as the API lists it once created. It is then marked failed, so that it stops: the
    platform's on-demand flow (``promoted_run``, which the MLflow and log tests below look
    at) trains and promotes a model already, and this run would only repeat it."""
    url = platform.record["airflow_url"]
    page = new_page(browser, signed_in=platform)
    folder = SCREENSHOTS / "form_triggered_run"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    try:
        dialog = open_trigger_form(page, url)
        for name, value in TYPED.items():
            dialog.locator(f"[name='element_{name}']").fill(value)
        promote = dialog.get_by_role("checkbox", name="Promote to champion if it passes", exact=True)
        promote.locator("xpath=..").click()  # the switch around the (visually hidden) input
        expect(promote).not_to_be_checked()
        page.screenshot(path=str(folder / "filled.png"), full_page=True)
        print(f"[screenshot] {folder / 'filled.png'}")
        dialog.get_by_role("button", name="Trigger", exact=True).click()
        expect(dialog).to_be_hidden()
    finally:
        page.context.close()
    runs = wait_until(
        lambda: platform.api("GET", f"/dags/{ON_DEMAND}/dagRuns")["dag_runs"], 60, 2, "the triggered run listed"
    )
    (run,) = runs
    platform.mark_run_failed(ON_DEMAND, run["dag_run_id"])
    wait_until(
        lambda: (
            not [
                t
                for t in platform.api("GET", f"/dags/{ON_DEMAND}/dagRuns/{run['dag_run_id']}/taskInstances")[
                    "task_instances"
                ]
                if t["state"] in ("running", "queued", "scheduled", "restarting", "up_for_retry")
            ]
        ),
        120,
        2,
        "the form-triggered run stopped",
    )
    return run


def test_a_run_triggered_from_the_form_carries_the_typed_params(platform, form_triggered_run):
    run = form_triggered_run
    assert run["triggered_by"] == "ui"
    conf = run["conf"]
    assert (conf["epochs"], conf["window_days"], conf["end_ds"], conf["promote"]) == (3, 1, DS, False)
    # The defaults, untouched: the workflow's declared rate and the platform's backend.
    declared_rate = workflows.load("mnist").model.training.learning_rate
    assert (conf["learning_rate"], conf["backend"]) == (declared_rate, "horovod")


@pytest.fixture(scope="module")
def training_run(promoted_run):
    """The MLflow run of the platform's on-demand flow (``promoted_run``: REST-triggered,
    trained on the curated window ``DAYS``, registered and promoted)."""
    return promoted_run[3]


def test_the_mlflow_experiment_opens_on_its_training_runs(platform, page, screenshot, training_run):
    """A first visit to the experiment's model-training link lands on its runs (named after
    the DAG run, with their datasets), not on the GenAI overview or traces."""
    url, experiment_id = platform.record["mlflow_url"], training_run.info.experiment_id
    page.goto(f"{url}/#/experiments/{experiment_id}?{ML_VIEW}")
    expect(page).to_have_url(re.compile(rf"#/experiments/{experiment_id}/runs\b"))
    expect(page.get_by_role("link", name=training_run.info.run_name)).to_be_visible()
    expect(page.get_by_text(f"mnist curated {WINDOW} training").first).to_be_visible()
    screenshot(page, "experiment")


def test_the_mlflow_run_page_shows_the_curves_and_the_confusion_matrix(platform, page, screenshot, training_run):
    url, run = platform.record["mlflow_url"], training_run
    base = f"{url}/#/experiments/{run.info.experiment_id}/runs/{run.info.run_id}"
    page.goto(f"{base}?{ML_VIEW}")
    expect(page.get_by_role("heading", name=run.info.run_name)).to_be_visible()
    expect(page.get_by_text(f"on the mnist curated window {WINDOW}")).to_be_visible()  # the description
    screenshot(page, "run-overview", full_page=True)

    page.goto(f"{base}/model-metrics?{ML_VIEW}")
    search = page.get_by_placeholder("Search metric charts")
    for kind in ("loss", "accuracy"):
        search.fill(kind)
        # One chart per metric, each a curve over the epochs (steps), training beside validation.
        expect(page.get_by_text(re.compile(rf"^(train|val)_{kind}$"))).to_have_text([f"train_{kind}", f"val_{kind}"])
        expect(page.get_by_text("Step", exact=True)).to_have_count(2)
        screenshot(page, f"curves-{kind}")

    page.goto(f"{base}/artifacts/holdout_confusion_matrix.png?{ML_VIEW}")
    expect(page.get_by_text("holdout_confusion_matrix.png").first).to_be_visible()
    image = page.locator("img[src^='blob:']").first
    expect(image).to_be_visible()
    assert image.evaluate("img => img.naturalWidth") > 500  # the rendered PNG, not a broken image
    screenshot(page, "confusion-matrix")


def test_the_mlflow_model_version_page_names_the_run_that_made_it(platform, page, screenshot, training_run):
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=platform.record["mlflow_url"])
    (version,) = client.search_model_versions(f"name = '{MODEL}' and run_id = '{training_run.info.run_id}'")
    page.goto(f"{platform.record['mlflow_url']}/#/models/{MODEL}/versions/{version.version}?{ML_VIEW}")
    expect(page.get_by_text(f"Version {version.version}", exact=True).first).to_be_visible()
    expect(page.get_by_role("link", name=training_run.info.run_name)).to_be_visible()
    expect(page.get_by_text("@ champion").or_(page.get_by_text("champion", exact=True)).first).to_be_visible()
    screenshot(page, "model-version", full_page=True)


def test_a_platform_runs_task_log_shows_in_the_ui(platform, page, screenshot, promoted_run):
    """The task log of a run the platform's scheduler made, in the Airflow UI: the Spark
    task's own lines, not "Log file not found on worker" (what runs made by
    ``airflow dags test`` outside the platform show)."""
    from urllib.parse import quote

    run_id = quote(promoted_run[1]["dag_run_id"], safe="")
    page.goto(f"{platform.record['airflow_url']}/dags/{ON_DEMAND}/runs/{run_id}/tasks/train_model")
    expect(page.get_by_text("Spark-Submit cmd").first).to_be_visible()
    expect(page.get_by_text("Log file not found")).to_have_count(0)
    screenshot(page, "train-model-log", full_page=True)


def test_the_gate_tasks_link_opens_the_mlflow_page_of_the_version_it_pinned(platform, page, screenshot, promoted_run):
    """After an on-demand run promoted its model, the Asset-triggered scoring run's gate
    task shows the "MLflow model version" link on its Details tab; it leads to the page of
    exactly the version the gate pinned (the new champion), the version the task scored with."""
    from urllib.parse import quote

    _, _, _, _, champion, rescore = promoted_run
    pinned = platform.api(
        "GET", f"/dags/{ON_NEW_CHAMPION}/dagRuns/{quote(rescore['dag_run_id'], safe='')}/taskInstances/gate_model"
    )
    assert pinned["state"] == "success", pinned
    run_id = quote(rescore["dag_run_id"], safe="")
    page.goto(f"{platform.record['airflow_url']}/dags/{ON_NEW_CHAMPION}/runs/{run_id}/tasks/gate_model/details")
    link = page.get_by_role("link", name="MLflow model version")
    expect(link).to_be_visible()
    screenshot(page, "gate-task-details", full_page=True)
    href = link.get_attribute("href")
    assert href == f"{platform.record['mlflow_url']}/#/models/{MODEL}/versions/{champion.version}", href
    page.goto(href)
    expect(page.get_by_text(f"Version {champion.version}", exact=True).first).to_be_visible()
    expect(page.get_by_text("@ champion").or_(page.get_by_text("champion", exact=True)).first).to_be_visible()
    screenshot(page, "pinned-model-version", full_page=True)
