"""Spark's Python workers run calving's interpreter unless the user chose one, whether
the SparkContext starts before or after ``calving.sink()``; a local session calving
starts listens on loopback only."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from types import SimpleNamespace

import pytest

from calving.ingest.worker_python import PYSPARK_DEFAULT, use_this_python


@pytest.fixture
def no_choice(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)


def test_unset_variable_names_this_interpreter(no_choice: None) -> None:
    context = SimpleNamespace(pythonExec=PYSPARK_DEFAULT)
    assert use_this_python(context) == sys.executable
    assert os.environ["PYSPARK_PYTHON"] == sys.executable
    assert context.pythonExec == sys.executable  # a context that already runs


def test_a_users_choice_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYSPARK_PYTHON", "/opt/py/bin/python")
    context = SimpleNamespace(pythonExec=PYSPARK_DEFAULT)
    assert use_this_python(context) == "/opt/py/bin/python"
    assert context.pythonExec == PYSPARK_DEFAULT


def test_a_context_started_with_a_chosen_python_is_kept(no_choice: None) -> None:
    context = SimpleNamespace(pythonExec="/opt/py/bin/python")
    use_this_python(context)
    assert context.pythonExec == "/opt/py/bin/python"


#: A user's script: calving.sink() first, then the user's own local session; a Python
#: function on the workers imports calving. Then a session built by calving itself.
SCRIPT = textwrap.dedent(
    """
    import sys
    import calving
    from pyspark.sql import SparkSession

    sink = calving.sink(
        catalog=f"sqlite:///{sys.argv[1]}/catalog.db", warehouse=sys.argv[1] + "/wh",
        table="db.t", writer_id="w", columns=[{"name": "id", "type": "long"}],
    )
    spark = (
        SparkSession.builder.master("local[1]")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .getOrCreate()
    )
    print("python", spark.sparkContext.pythonExec)

    def imports_calving(batches):
        import calving  # noqa: F401  (fails on a worker without calving)
        yield from batches

    print("rows", spark.range(3).mapInArrow(imports_calving, "id long").count())
    spark.stop()

    from calving.ingest.config.runtime import SparkConfig
    from calving.ingest.pipeline import spark_session

    cfg = SparkConfig(master="local[1]", conf={"spark.sql.ui.retainedExecutions": "7"})
    conf = spark_session(cfg).sparkContext.getConf()
    print("driver", conf.get("spark.driver.host"), conf.get("spark.driver.bindAddress"))
    print("retained", *(conf.get(f"spark.{k}") for k in ("ui.retainedJobs",
          "ui.retainedStages", "sql.ui.retainedExecutions")))
    """
)


@pytest.mark.integration
@pytest.mark.slow
def test_sink_before_the_session_in_a_fresh_process(tmp_path) -> None:
    bin_dir = os.path.dirname(sys.executable)
    path = os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep) if p != bin_dir)
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "SPARK_LOCAL_IP", "VIRTUAL_ENV")
    }
    env["PATH"] = path  # python3 on PATH is not this venv's (it lacks calving)
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path)],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = dict(line.split(" ", 1) for line in done.stdout.splitlines() if " " in line)
    assert lines["python"] == sys.executable
    assert lines["driver"] == "127.0.0.1 127.0.0.1"
    assert lines["rows"] == "3"
    # calving's driver defaults bound Spark's status store; [spark.conf] wins.
    assert lines["retained"] == "100 100 7"


JVM_SCRIPT = textwrap.dedent(
    """
    from calving.ingest.config.runtime import SparkConfig
    from calving.ingest.pipeline import spark_session

    extra = {"spark.driver.extraJavaOptions": "-Dcalving.test.extra=1"}
    spark = spark_session(SparkConfig(master="local[1]", conf=extra))
    bean = spark._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean()
    for arg in bean.getInputArguments():
        print("arg", arg)
    spark.stop()
    """
)


@pytest.mark.integration
@pytest.mark.slow
def test_the_driver_jvm_calving_starts_has_its_collector_settings(tmp_path) -> None:
    from calving.ingest.pipeline import DRIVER_JAVA_OPTIONS

    done = subprocess.run(
        [sys.executable, "-c", JVM_SCRIPT],
        cwd=tmp_path, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    args = [line.split(" ", 1)[1] for line in done.stdout.splitlines() if line.startswith("arg ")]
    # calving's defaults reach the JVM, and a user's extraJavaOptions come after them.
    assert all(flag in args for flag in DRIVER_JAVA_OPTIONS.split()), args
    assert "-Dcalving.test.extra=1" in args
    assert args.index("-Dcalving.test.extra=1") > args.index("-XX:GCTimeRatio=4")
