# The two commands of the README, and the benchmark suite. Each creates or reuses .venv by itself.
.PHONY: demo up down test test-fast lint format bench check

demo:
	scripts/setup_env.sh
	.venv/bin/python scripts/run_nightly.py $(if $(WORKFLOW),--workflow $(WORKFLOW))

# The platform to work in: Airflow (UI, scheduler, DAG processor, triggerer) and MLflow on an
# embedded PostgreSQL, on 127.0.0.1, until `make down` (scripts/platform_stack.py).
up:
	scripts/setup_env.sh
	.venv/bin/python scripts/platform_stack.py up

down:
	.venv/bin/python scripts/platform_stack.py down

# A workflow declaration checked end to end before a scheduler sees it (every declared one
# without WORKFLOW=): its keys, its model built, scripted and run on sample rows, its DAGs.
check:
	scripts/setup_env.sh
	.venv/bin/python scripts/check_workflow.py $(WORKFLOW)

test:
	scripts/setup_env.sh --dev
	$(MAKE) lint
	.venv/bin/python -m pytest tests -n 4 --dist loadgroup

# The unit tier: no server started or reached (see the markers in pytest.ini).
test-fast:
	scripts/setup_env.sh --dev
	.venv/bin/python -m pytest tests -m unit -n 2 --dist loadgroup

# ruff's lint rules and formatter, and mypy's types (pyproject.toml), as `make test` checks them.
lint:
	.venv/bin/ruff check .
	.venv/bin/ruff check --preview --select AIR .  # Airflow's preview rules too (explicit multiple_outputs)
	.venv/bin/ruff format --check .
	.venv/bin/mypy  # dags/, plugins/ and spark_jobs/ ([tool.mypy] in pyproject.toml)

format:
	.venv/bin/ruff check --fix .
	.venv/bin/ruff format .

# About 20 minutes on 2 cores; writes benchmarks/results/ (results.md, results.json, *.png),
# then the measured figures of docs/performance.md from that report (benchmarks/publish.py).
# BENCH_SIZE=tiny: every benchmark end to end on small data in about 5 minutes, a check of
# the harness whose figures mean nothing: its report is written, not published.
BENCH_SIZE ?= default
bench:
	scripts/setup_env.sh --dev
	.venv/bin/python -m benchmarks --size $(BENCH_SIZE)
	$(if $(filter default,$(BENCH_SIZE)),.venv/bin/python -m benchmarks.publish,@echo "[bench] a --size $(BENCH_SIZE) report is not published: benchmarks/results/results.md")
