"""Write a JVM class-data-sharing archive of what a calving Spark driver loads.

CI only (``.ci/run``): the suite starts a few hundred short-lived Spark driver JVMs,
each of which loads and verifies the same ~20,000 classes from Spark's jars before
doing any work. ``-XX:ArchiveClassesAtExit`` makes this process's driver JVM dump the
classes it loaded at exit; drivers started with ``-XX:SharedArchiveFile`` map them
instead. A JVM whose class path differs from this one's ignores the archive and loads
classes as usual. Users' drivers are untouched: calving sets nothing of the kind.

    SPARK_SUBMIT_OPTS="... -XX:ArchiveClassesAtExit=PATH" python .ci/jvm_archive.py
"""

from __future__ import annotations

import sys
import tempfile
import time

from pyspark.sql import SparkSession


def main() -> int:
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("calving-ci-jvm-archive")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    # What a driver runs: SQL, Python RDD jobs, a structured stream with foreachBatch.
    spark.range(1000).selectExpr("id % 7 AS k", "id").groupBy("k").count().collect()
    spark.sparkContext.parallelize(range(100), 2).map(lambda x: x * 2).sum()
    with tempfile.TemporaryDirectory() as tmp:
        seen: list[int] = []
        query = (
            spark.readStream.format("rate")
            .option("rowsPerSecond", 50)
            .load()
            .writeStream.option("checkpointLocation", f"{tmp}/ckpt")
            .foreachBatch(lambda df, batch_id: seen.append(df.count()))
            .trigger(processingTime="200 milliseconds")
            .start()
        )
        deadline = time.monotonic() + 60
        while len(seen) < 3 and time.monotonic() < deadline:
            time.sleep(0.2)
        query.stop()
    jvm = spark.sparkContext._gateway.proc  # the driver JVM: it writes the archive as it exits
    spark.stop()
    jvm.stdin.close()  # the gateway exits when its stdin closes
    return 0 if jvm.wait(timeout=300) == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
