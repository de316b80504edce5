"""One pipeline, many tables (whole-database CDC): a micro-batch's Kafka ranges are
routed per topic to tables (``calving.ingest.config.router``), each table is written by fused
tasks and all the tables a batch touched are committed in one catalog transaction.

A batch's stages, each testable without Spark:

* ``route``: topics -> tables (``discover``: the driver's first sight of a topic, its
  table created or loaded);
* ``plan``: a ``TablePlan`` per table, the ranges packed into tasks;
* ``write``: the tasks run on a ``runner.TaskRunner`` (the seam: a Spark job, or in
  this process); ``tasks`` is the executor side: read, decode and write each table's
  ranges, report the change-event schemas seen;
* ``follow``: the evolve stage (``evolve``: source schema changes -> the table's schema
  update, or the table stops); ``boundaries``: source-transaction boundaries around the
  stages (``transactions``: the tracker and its rules);
* ``commit``: every table's commit in one catalog transaction;
* ``start``: the restart point from every table's ledger;
* ``sink``: the ``foreachBatch`` callable tying them together.
"""
