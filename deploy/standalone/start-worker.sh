#!/usr/bin/env bash
# Start a Spark standalone worker from the pip-installed PySpark and register it with a
# master. pip's pyspark has no sbin/start-worker.sh; this script does what that does.
#
# Usage: deploy/standalone/start-worker.sh [MASTER_URL] [extra Worker arguments]
#   MASTER_URL  spark://HOST:PORT (comma-separate several masters with ZooKeeper HA:
#               spark://m1:7077,m2:7077); default: $SPARK_MASTER_URL
#
# Environment (all optional unless noted):
#   SPARK_MASTER_URL       the master URL when none is given as the first argument (required then)
#   SPARK_WORKER_HOST      host name or IP the worker binds to and advertises; executors on
#                          this worker are reached by the driver under it. Default:
#                          127.0.0.1, which only a master and drivers on this host can reach:
#                          set it to the host's name or address for a cluster of several hosts
#   SPARK_LOCAL_IP         address the worker's web UI binds to (default: SPARK_WORKER_HOST)
#   SPARK_WORKER_CORES     cores offered to executors (default: all of the host's)
#   SPARK_WORKER_MEMORY    memory offered to executors, e.g. 8g (default: host memory - 1g).
#                          Python workers of the executors use memory beyond this: leave room.
#   SPARK_WORKER_PORT      RPC port (default: random)
#   SPARK_WORKER_WEBUI_PORT  web UI port (default: 8081 + instance - 1)
#   SPARK_WORKER_INSTANCE  instance number when one host runs several workers (default: 1)
#   SPARK_WORKER_OPTS      -D options for the worker JVM. By default this script adds
#                          -Dspark.worker.preferConfiguredMasterAddress=true so the worker
#                          keeps using MASTER_URL (e.g. a Kubernetes Service name) instead of
#                          the address the master advertises.
#   SPARK_DAEMON_MEMORY    worker JVM heap (Spark's default: 1g)
#   SPARK_NO_DAEMONIZE     set to anything to run in the foreground (containers, systemd)
#   PYTHON, SPARK_HOME, CALVING_SPARK_DIR, SPARK_LOG_DIR, SPARK_PID_DIR, SPARK_WORKER_DIR:
#                          see common.sh
#
# Executors started by this worker inherit its environment: that is where S3 credentials
# (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION) for writing Parquet files go.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=common.sh
. "$here/common.sh"
calving_spark_env

master=${SPARK_MASTER_URL:-}
if [ $# -gt 0 ] && [[ $1 == spark://* ]]; then
  master=$1
  shift
fi
if [ -z "$master" ]; then
  echo "usage: $0 spark://MASTER_HOST:7077 [worker args]  (or set SPARK_MASTER_URL)" >&2
  exit 2
fi
if [[ $master != spark://* ]]; then
  echo "error: the master URL must look like spark://HOST:PORT, got '$master'" >&2
  exit 2
fi

instance=${SPARK_WORKER_INSTANCE:-1}
if ! [[ $instance =~ ^[1-9][0-9]*$ ]]; then
  echo "error: SPARK_WORKER_INSTANCE must be a positive integer, got '$instance'" >&2
  exit 2
fi
webui_port=${SPARK_WORKER_WEBUI_PORT:-$((8081 + instance - 1))}

calving_java_opt SPARK_WORKER_OPTS spark.worker.preferConfiguredMasterAddress true
calving_auth SPARK_WORKER_OPTS
# Loopback unless told otherwise: Spark would advertise the host's network address and
# bind the web UI to every interface.
SPARK_WORKER_HOST=${SPARK_WORKER_HOST:-127.0.0.1}
export SPARK_LOCAL_IP=${SPARK_LOCAL_IP:-$SPARK_WORKER_HOST}

args=(--webui-port "$webui_port" --work-dir "$SPARK_WORKER_DIR" --host "$SPARK_WORKER_HOST")
if [ -n "${SPARK_WORKER_PORT:-}" ]; then args+=(--port "$SPARK_WORKER_PORT"); fi
if [ -n "${SPARK_WORKER_CORES:-}" ]; then args+=(--cores "$SPARK_WORKER_CORES"); fi
if [ -n "${SPARK_WORKER_MEMORY:-}" ]; then args+=(--memory "$SPARK_WORKER_MEMORY"); fi

echo "spark worker $instance on $SPARK_WORKER_HOST (web UI $SPARK_LOCAL_IP:$webui_port) -> $master, SPARK_HOME=$SPARK_HOME" >&2
calving_launch org.apache.spark.deploy.worker.Worker "$instance" "${args[@]}" "$@" "$master"
