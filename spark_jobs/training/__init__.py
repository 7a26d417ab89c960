"""Data-parallel training of a workflow's model on Spark, split along its seams.

- :mod:`~spark_jobs.training.shards`: the driver writes the training rows as a Parquet
  file per rank (``label``, ``features``); each rank reads and decodes its own.
- :mod:`~spark_jobs.training.loop`: the per-rank loop, the same for every backend and
  workflow (:class:`~spark_jobs.training.loop.TrainConfig`, the loss and its metric).
- :mod:`~spark_jobs.training.collectives`: what the loop needs from the ranks' group,
  with Horovod or ``torch.distributed``.
- :mod:`~spark_jobs.training.checkpoints`: per-epoch state a retry resumes from.
- :mod:`~spark_jobs.training.launch`: starting the ranks (``horovod.spark.run`` or
  ``TorchDistributor``) and the environment they get.
- :mod:`~spark_jobs.training.model_logging`: the serving model, its tensor signature and
  input example, logged to MLflow.

The job itself (arguments, the MLflow run, the manifest) is :mod:`spark_jobs.train`.
"""
