"""Which Python Spark's Python workers run: this interpreter, unless the user chose one.

PySpark reads ``PYSPARK_PYTHON`` once, when a ``SparkContext`` is created, into
``SparkContext.pythonExec`` (default ``python3`` from the workers' PATH, which usually
lacks calving); every Python function it sends to the JVM afterwards (UDFs,
``mapInArrow``, a registered Python data source) carries that value. The
``spark.pyspark.python`` setting is read only by ``spark-submit`` and the ``pyspark``
shell, not by a session a Python script builds itself.

So ``use_this_python()`` sets ``PYSPARK_PYTHON`` to ``sys.executable`` when it is unset
(for a context created later) and, when a context already runs with the default
``python3``, points its ``pythonExec`` at ``sys.executable`` too (for the functions
created from now on). A ``PYSPARK_PYTHON`` the user set, or a context created with one,
is left alone.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Any

log = logging.getLogger("calving.spark")

#: PySpark's ``pythonExec`` when ``PYSPARK_PYTHON`` was unset at context creation.
PYSPARK_DEFAULT = "python3"


def use_this_python(context: Any | None = None) -> str:
    """Make Spark's Python workers run ``sys.executable`` unless ``PYSPARK_PYTHON`` is
    set; ``context`` is a running ``SparkContext`` (default: the active one, if PySpark
    is loaded). Returns the interpreter the workers will run."""
    chosen = os.environ.get("PYSPARK_PYTHON")
    if chosen:
        return chosen
    os.environ["PYSPARK_PYTHON"] = sys.executable
    if context is None:
        context = _active_context()
    if context is not None and getattr(context, "pythonExec", None) == PYSPARK_DEFAULT:
        context.pythonExec = sys.executable
        log.info(
            "Spark's Python workers now run %s (PYSPARK_PYTHON was unset when the "
            "SparkContext started)",
            sys.executable,
        )
    return sys.executable


def _active_context() -> Any | None:
    """The active ``SparkContext`` if PySpark is already imported (never imports it)."""
    module = sys.modules.get("pyspark.core.context") or sys.modules.get("pyspark.context")
    if module is None:
        return None
    return getattr(getattr(module, "SparkContext", None), "_active_spark_context", None)
