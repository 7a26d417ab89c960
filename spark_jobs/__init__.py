"""Spark computation for the ML workflows: one importable module per step.

Nothing here imports Airflow; every job gets its inputs as command-line arguments
(see each module's ``main(argv)``) and is submitted by a thin file in ``entrypoints/``.
"""
