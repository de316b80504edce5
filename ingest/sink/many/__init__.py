"""One pipeline, many tables (whole-database CDC): a micro-batch's Kafka ranges are
routed per topic to tables (``calving.ingest.config.router``), each table is written by fused
tasks and all the tables a batch touched are committed in one catalog transaction.

* ``tasks``: the executor side: read, decode and write each table's ranges; report
  the change-event schemas seen.
* ``discover``: the driver's first sight of a topic: route it, create or load its table.
* ``evolve``: source schema changes -> the table's schema update (or the table stops).
* ``sink``: the ``foreachBatch`` callable tying them together.
"""
