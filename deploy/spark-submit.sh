#!/usr/bin/env bash
# Run one calving pipeline with spark-submit (client deploy mode by default).
#
# Usage:
#   deploy/spark-submit.sh CONFIG.toml [--available-now]
#   deploy/spark-submit.sh [spark-submit options ...] -- CONFIG.toml [--available-now]
#
#   e.g. deploy/spark-submit.sh --master spark://m1:7077 --conf spark.executor.memory=4g \
#          -- config/orders.toml
#
# What it does:
#   1. zips calving's Python packages, laid out as installed (calving/, calving/commit/,
#      calving/ingest/: deploy/build_pyfiles.py reads pyproject.toml's package-dir) into
#      $CALVING_BUILD_DIR/calving-<version>-pyfiles.zip. A zip rather than a wheel: PySpark
#      puts --py-files on the executors' sys.path only for .zip/.egg/.jar names
#      (SparkContext.PACKAGE_EXTENSIONS), not .whl.
#   2. runs $SPARK_HOME/bin/spark-submit --py-files that zip deploy/calving_app.py, which is
#      `calving run CONFIG.toml [--available-now]` inside the spark-submit driver.
#
# The zip carries calving's own code only (it wins over an installed calving on sys.path).
# Its dependencies (pyarrow, fastavro, pyroaring, confluent-kafka, pandas, psycopg, ...)
# must already be installed in the interpreters named below, on the driver host and on
# every worker host: pip install '.[ingest,postgres]' (or the wheel) there.
#
# Client mode: the calving coordinator runs inside this driver process, so this command is
# the long-lived process of the pipeline. Supervise it (systemd, a container restart
# policy) and restart it with the same CONFIG (same writer_id and checkpoint). Spark
# refuses cluster deploy mode for Python applications on standalone masters; on YARN or
# Kubernetes, CALVING_DEPLOY_MODE=cluster works if the driver is restarted the same way
# and CONFIG is a path that exists where the driver runs (this script does not ship it).
#
# Environment (all optional):
#   PYTHON                 interpreter that builds the zip and, by default, runs the driver
#                          and the executors' Python workers. Default: the first of these
#                          that imports pyspark and calving: the active virtualenv's
#                          ($VIRTUAL_ENV), this checkout's .venv, the interpreter of the
#                          `calving` command on PATH, python3
#   SPARK_HOME             default: the directory of $PYTHON's pip-installed pyspark
#   SPARK_MASTER_URL       added as --master unless the options contain --master; without
#                          either, spark-submit uses spark-defaults.conf or local[*]
#   PYSPARK_PYTHON         interpreter path ON THE WORKERS (spark.pyspark.python; default:
#                          the absolute path of $PYTHON, which must then exist on every worker)
#   PYSPARK_DRIVER_PYTHON  driver interpreter (spark.pyspark.driver.python; default: as above)
#   CALVING_DEPLOY_MODE    client (default) or cluster; ignored if the options give --deploy-mode
#   CALVING_BUILD_DIR      where the zip is written (default:
#                          ${XDG_CACHE_HOME:-$HOME/.cache}/calving/deploy, outside the checkout)
#   CALVING_DRIVER_LOG4J2  log4j2 configuration of the driver JVM (default: the repository's
#                          config/log4j2.properties: Spark at WARN, no INFO chatter; unless
#                          $SPARK_CONF_DIR has a log4j2.properties, which Spark then reads).
#                          Set it empty to keep Spark's default (INFO). Passed through
#                          SPARK_SUBMIT_OPTS, so a --driver-java-options setting wins.
#   SPARK_SUBMIT_OPTS      extra JVM options of the driver (spark-submit's own variable)
#   SPARK_LOCAL_IP         address the driver's web UI binds to. Default: the value of
#                          --conf spark.driver.bindAddress=..., else of --conf
#                          spark.driver.host=..., given to this script; with none of these
#                          Spark binds the driver UI to every interface.
#
# Also added before your options (yours win): spark.ui.showConsoleProgress=false, so the
# driver's log has no [Stage ...] progress bars.
# Options given before `--` go to spark-submit after these defaults, so a --conf given
# there wins. An extra --py-files value is merged with the calving zip.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
# shellcheck source=standalone/common.sh
. "$here/standalone/common.sh"
calving_find_python

# ---------------------------------------------------------------- arguments
spark_args=()
app_args=()
seen_separator=0
for arg in "$@"; do
  if [ "$seen_separator" -eq 0 ] && [ "$arg" = "--" ]; then
    seen_separator=1
  elif [ "$seen_separator" -eq 1 ]; then
    app_args+=("$arg")
  else
    spark_args+=("$arg")
  fi
done
if [ "$seen_separator" -eq 0 ]; then
  # No `--`: every argument is calving's.
  app_args=("$@")
  spark_args=()
fi
if [ "${#app_args[@]}" -eq 0 ]; then
  echo "usage: $0 [spark-submit options ... --] CONFIG.toml [--available-now]" >&2
  exit 2
fi

# Pull --master, --deploy-mode and --py-files out of the spark-submit options.
master=${SPARK_MASTER_URL:-}
master_given=0
deploy_mode=${CALVING_DEPLOY_MODE:-client}
extra_py_files=""
rest=()
i=0
while [ "$i" -lt "${#spark_args[@]}" ]; do
  arg=${spark_args[$i]}
  case "$arg" in
    --master | --deploy-mode | --py-files)
      if [ $((i + 1)) -ge "${#spark_args[@]}" ]; then
        echo "error: $arg needs a value" >&2
        exit 2
      fi
      value=${spark_args[$((i + 1))]}
      i=$((i + 2))
      ;;
    --master=* | --deploy-mode=* | --py-files=*)
      value=${arg#*=}
      arg=${arg%%=*}
      i=$((i + 1))
      ;;
    *)
      rest+=("$arg")
      i=$((i + 1))
      continue
      ;;
  esac
  case "$arg" in
    --master) master=$value; master_given=1 ;;
    --deploy-mode) deploy_mode=$value ;;
    --py-files) extra_py_files=$value ;;
  esac
done

case "$deploy_mode" in
  client) ;;
  cluster)
    if [[ $master == spark://* ]]; then
      echo "error: Spark does not run Python applications in cluster deploy mode on a" \
        "standalone master ($master); use client mode (the default)" >&2
      exit 2
    fi
    ;;
  *)
    echo "error: deploy mode must be client or cluster, got '$deploy_mode'" >&2
    exit 2
    ;;
esac
config=${app_args[0]}
if [ "$deploy_mode" = client ] && [ ! -f "$config" ]; then
  echo "error: config file '$config' not found (the driver runs here and reads it)" >&2
  exit 2
fi

# ---------------------------------------------------------------- Spark and Python
python_path=$("$PYTHON" -c 'import sys; print(sys.executable)')
if [ -z "${SPARK_HOME:-}" ]; then
  if ! SPARK_HOME=$("$PYTHON" -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))'); then
    echo "error: cannot import pyspark with $PYTHON; pip install '.[ingest,postgres]' or set PYTHON or SPARK_HOME" >&2
    exit 1
  fi
fi
export SPARK_HOME
if [ ! -x "$SPARK_HOME/bin/spark-submit" ]; then
  echo "error: $SPARK_HOME/bin/spark-submit not found or not executable" >&2
  exit 1
fi
executor_python=${PYSPARK_PYTHON:-$python_path}
driver_python=${PYSPARK_DRIVER_PYTHON:-$python_path}

# ---------------------------------------------------------------- the zip
build_dir=${CALVING_BUILD_DIR:-${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/calving/deploy}
mkdir -p "$build_dir"
zip_path=$("$PYTHON" "$here/build_pyfiles.py" "$repo" "$build_dir")
py_files=$zip_path
if [ -n "$extra_py_files" ]; then py_files="$py_files,$extra_py_files"; fi

# ---------------------------------------------------------------- driver logs and UI
if [ -z "${CALVING_DRIVER_LOG4J2+set}" ]; then
  CALVING_DRIVER_LOG4J2=$repo/config/log4j2.properties
  if [ -n "${SPARK_CONF_DIR:-}" ] && [ -f "$SPARK_CONF_DIR/log4j2.properties" ]; then
    CALVING_DRIVER_LOG4J2=""
  fi
fi
if [ -n "$CALVING_DRIVER_LOG4J2" ]; then
  if [ ! -f "$CALVING_DRIVER_LOG4J2" ] || [[ $CALVING_DRIVER_LOG4J2 =~ [[:space:]] ]]; then
    echo "error: CALVING_DRIVER_LOG4J2='$CALVING_DRIVER_LOG4J2' is not a file (or has spaces)" >&2
    exit 2
  fi
  export SPARK_SUBMIT_OPTS="-Dlog4j2.configurationFile=$CALVING_DRIVER_LOG4J2${SPARK_SUBMIT_OPTS:+ $SPARK_SUBMIT_OPTS}"
fi

# Spark binds the driver's web UI to SPARK_LOCAL_IP, else to every interface: default it to
# the address the driver is configured to bind (or advertise).
bind_address=""
driver_host=""
for ((i = 0; i + 1 < ${#rest[@]}; i++)); do
  if [ "${rest[$i]}" = --conf ]; then
    case "${rest[$((i + 1))]}" in
      spark.driver.bindAddress=*) bind_address=${rest[$((i + 1))]#*=} ;;
      spark.driver.host=*) driver_host=${rest[$((i + 1))]#*=} ;;
    esac
  fi
done
if [ -z "${SPARK_LOCAL_IP:-}" ] && [ -n "${bind_address:-$driver_host}" ]; then
  export SPARK_LOCAL_IP=${bind_address:-$driver_host}
fi

# ---------------------------------------------------------------- submit
submit=(--deploy-mode "$deploy_mode")
if [ -n "$master" ]; then
  submit+=(--master "$master")
elif [ "$master_given" -eq 0 ]; then
  echo "note: no --master and no SPARK_MASTER_URL: spark-submit uses spark.master from" \
    "spark-defaults.conf, else local[*]" >&2
fi
submit+=(
  --conf "spark.pyspark.python=$executor_python"
  --conf "spark.pyspark.driver.python=$driver_python"
  --conf spark.ui.showConsoleProgress=false
  ${rest[@]+"${rest[@]}"}
  --py-files "$py_files"
  "$here/calving_app.py"
  "${app_args[@]}"
)
echo "+ $SPARK_HOME/bin/spark-submit ${submit[*]}" >&2
if [ "$deploy_mode" != client ]; then
  exec "$SPARK_HOME/bin/spark-submit" "${submit[@]}"
fi

# ---------------------------------------------------------------- clean stops (client mode)
# In client mode the driver JVM is spark-submit and the calving driver (calving_app.py) is
# its Python child. A SIGTERM that reached the JVM would stop the SparkContext under the
# running query. So spark-submit runs in a session (and process group) of its own, out of
# reach of a signal to this script's group (`kill -TERM -PGID`, `timeout`, Ctrl-C), and
# this script hands SIGTERM / SIGINT to the calving driver only: it stops the query between
# batches and exits 0, and the JVM follows. Under systemd use KillMode=mixed (the SIGTERM
# goes to this script alone; deploy/systemd/calving-submit.service).
# shellcheck disable=SC2329  # called from forward_signal, which the traps below call
calving_driver_pids() {
  # Processes of spark-submit's session whose program is calving_app.py: the Python
  # driver (PYTHON calving_app.py ...), not the JVM that has it among its arguments.
  local stat pid rest sid argv
  for stat in /proc/[0-9]*/stat; do
    pid=${stat#/proc/}
    pid=${pid%/stat}
    { read -r rest <"$stat"; } 2>/dev/null || continue
    rest=${rest##*) }
    read -r _ _ _ sid _ <<<"$rest"
    [ "$sid" = "$submit_pid" ] || continue
    mapfile -d '' -t argv <"/proc/$pid/cmdline" 2>/dev/null || continue
    if [[ ${argv[1]:-} == *calving_app.py ]]; then echo "$pid"; fi
  done
}
# shellcheck disable=SC2329  # called by the TERM/INT traps
forward_signal() {
  local drivers
  drivers=$(calving_driver_pids)
  if [ -n "$drivers" ]; then
    # shellcheck disable=SC2086  # one pid per word
    kill "-$1" $drivers 2>/dev/null || true
  else
    # The Python driver has not started yet: stop spark-submit itself.
    kill "-$1" -- "-$submit_pid" 2>/dev/null || true
  fi
}
setsid "$SPARK_HOME/bin/spark-submit" "${submit[@]}" &
submit_pid=$!
trap 'forward_signal TERM' TERM
trap 'forward_signal INT' INT
while :; do
  status=0
  wait "$submit_pid" || status=$?
  # wait returns early (status > 128) when a trapped signal arrives: keep waiting.
  if ! kill -0 "$submit_pid" 2>/dev/null; then break; fi
done
exit "$status"
