# The two commands of the README, and the benchmark suite. Each creates or reuses .venv by itself.
.PHONY: demo test bench

demo:
	scripts/setup_env.sh
	.venv/bin/python scripts/run_nightly.py

test:
	scripts/setup_env.sh --dev
	.venv/bin/python -m pytest tests

# About 15 minutes on 2 cores; writes benchmarks/results/ (results.md, results.json, *.png).
bench:
	scripts/setup_env.sh --dev
	.venv/bin/python -m benchmarks
