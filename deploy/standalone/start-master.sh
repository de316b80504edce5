#!/usr/bin/env bash
# Start a Spark standalone master from the pip-installed PySpark.
#
# pip's pyspark ships sbin/spark-daemon.sh and bin/spark-class but not Spark's
# sbin/start-master.sh; this script does what start-master.sh does.
#
# Usage: deploy/standalone/start-master.sh [extra Master arguments, e.g. --properties-file F]
#
# Environment (all optional):
#   SPARK_MASTER_HOST        host name or IP the master binds to and advertises in its URL
#                            spark://HOST:PORT. Workers, drivers and executors must be able
#                            to resolve and reach it. Default: 127.0.0.1 (workers and drivers
#                            on this host only): set it for a cluster of several hosts.
#   SPARK_MASTER_PORT        RPC port (default: 7077)
#   SPARK_MASTER_WEBUI_PORT  web UI port (default: 8080)
#   SPARK_LOCAL_IP           address the web UI binds to (default: SPARK_MASTER_HOST). Spark
#                            binds web UIs to SPARK_LOCAL_IP, else to every interface; this
#                            script keeps the UI on the interface the master's RPC uses.
#   CALVING_SPARK_MASTER_REST  true to run Spark's REST submission server (port 6066,
#                            spark.master.rest.port, bound to the master host). Default false:
#                            pyspark 4 turns it on by default, and it accepts applications
#                            from anyone who reaches the port (spark.authenticate does not
#                            cover it). -Dspark.master.rest.enabled in SPARK_MASTER_OPTS wins.
#   SPARK_MASTER_OPTS        -D options for the master JVM, e.g. ZooKeeper recovery:
#                            "-Dspark.deploy.recoveryMode=ZOOKEEPER -Dspark.deploy.zookeeper.url=zk:2181"
#   SPARK_DAEMON_MEMORY      master JVM heap (Spark's default: 1g)
#   SPARK_NO_DAEMONIZE       set to anything to run in the foreground (containers, systemd)
#   PYTHON, SPARK_HOME, CALVING_SPARK_DIR, SPARK_LOG_DIR, SPARK_PID_DIR: see common.sh
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=common.sh
. "$here/common.sh"
calving_spark_env

SPARK_MASTER_HOST=${SPARK_MASTER_HOST:-127.0.0.1}  # loopback unless told otherwise
SPARK_MASTER_PORT=${SPARK_MASTER_PORT:-7077}
SPARK_MASTER_WEBUI_PORT=${SPARK_MASTER_WEBUI_PORT:-8080}
export SPARK_LOCAL_IP=${SPARK_LOCAL_IP:-$SPARK_MASTER_HOST}

case "${CALVING_SPARK_MASTER_REST:-false}" in
  true | 1 | yes) rest=true ;;
  false | 0 | no | "") rest=false ;;
  *)
    echo "error: CALVING_SPARK_MASTER_REST must be true or false, got '$CALVING_SPARK_MASTER_REST'" >&2
    exit 2
    ;;
esac
calving_java_opt SPARK_MASTER_OPTS spark.master.rest.enabled "$rest"
calving_auth SPARK_MASTER_OPTS

echo "spark master: spark://$SPARK_MASTER_HOST:$SPARK_MASTER_PORT (web UI $SPARK_LOCAL_IP:$SPARK_MASTER_WEBUI_PORT, REST server $rest), SPARK_HOME=$SPARK_HOME" >&2
calving_launch org.apache.spark.deploy.master.Master 1 \
  --host "$SPARK_MASTER_HOST" \
  --port "$SPARK_MASTER_PORT" \
  --webui-port "$SPARK_MASTER_WEBUI_PORT" \
  "$@"
