"""Kafka in: the ``calving-kafka`` Spark streaming source, its offset arithmetic, and the
embedded Tansu broker plus a bulk producer for demos, tests and benchmarks.

Importing this package imports neither pyspark nor confluent_kafka; import the modules.
"""
