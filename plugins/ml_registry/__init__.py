"""Airflow extensions for the model registry: the gate operator, its MLflow hook and link.

Kept free of job logic (that lives in ``spark_jobs/``) and of heavy imports at module level:
the scheduler and the dag processor import this package. Modules import each other by
absolute name because Airflow's plugin loader also executes every file under ``plugins/``
as a top-level module.
"""
