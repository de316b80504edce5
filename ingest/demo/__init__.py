"""``calving demo``: the embedded default, end to end on one machine (Tansu broker, a
Debezium-style CDC generator, the Spark stream, a live progress display and an
independent read-back check)."""
