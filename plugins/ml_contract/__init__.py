"""The rules both sides of the Airflow/Spark line agree on, defined once.

Imported by the DAG files and plugins (``plugins/`` is on the sys.path of every Airflow
component) and by the Spark jobs (the jobs' ``--py-files`` archive carries this package
beside ``spark_jobs``, see ``scripts/package_jobs.py``):

- :mod:`ml_contract.workflows`: the workflow declaration's schema and checks;
- :mod:`ml_contract.layout`: the partition layout (``<root>/ds=YYYY-MM-DD``), the held-out
  split (share and seed), the nightly's schedule time.

It imports neither Airflow, Spark nor torch, so that either side can import it cheaply.
"""
