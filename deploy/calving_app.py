"""spark-submit entry point for calving: ``calving run`` with the script's arguments.

    spark-submit --py-files calving.zip deploy/calving_app.py CONFIG.toml [--available-now]

is the same as ``calving run CONFIG.toml [--available-now]`` run by spark-submit: the
master and deploy mode come from spark-submit, the config's ``[spark] master`` is ignored
(``calving.ingest.pipeline.spark_session``).
``deploy/spark-submit.sh`` builds the zip and calls spark-submit with this file.
"""

import sys

from calving.ingest.launch import prepare_driver

prepare_driver()  # glibc's arena and Arrow's pool, before the command imports pyarrow

from calving.ingest.cli import main

if __name__ == "__main__":
    sys.exit(main(["run", *sys.argv[1:]]))
