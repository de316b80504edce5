#!/usr/bin/env bash
# Stop the Spark standalone daemons that start-master.sh / start-worker.sh started on THIS
# host in the background (by their pid files). Unlike Spark's sbin/stop-all.sh it does not
# ssh to other hosts: run it on each host. Foreground daemons (SPARK_NO_DAEMONIZE) are
# stopped by whatever runs them (container runtime, systemd).
#
# Usage: deploy/standalone/stop-all.sh
#
# Environment: the same SPARK_PID_DIR / SPARK_IDENT_STRING / CALVING_SPARK_DIR / SPARK_HOME /
# PYTHON as when the daemons were started (see common.sh), so the pid files are found.
#
# A calving driver that is still running loses its executors when the workers stop; stop
# the driver first (its next start resumes from the checkpoint and the table's ledger).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=common.sh
. "$here/common.sh"
calving_spark_env

worker=org.apache.spark.deploy.worker.Worker
master=org.apache.spark.deploy.master.Master
stopped=0

# Workers first, every instance that has a pid file, then the master.
shopt -s nullglob
for pidfile in "$SPARK_PID_DIR/spark-$SPARK_IDENT_STRING-$worker-"*.pid; do
  instance=${pidfile##*-}
  instance=${instance%.pid}
  "$SPARK_HOME/sbin/spark-daemon.sh" stop "$worker" "$instance"
  stopped=$((stopped + 1))
done
if [ -f "$SPARK_PID_DIR/spark-$SPARK_IDENT_STRING-$master-1.pid" ]; then
  "$SPARK_HOME/sbin/spark-daemon.sh" stop "$master" 1
  stopped=$((stopped + 1))
fi

if [ "$stopped" -eq 0 ]; then
  echo "no pid files of spark daemons in $SPARK_PID_DIR (ident $SPARK_IDENT_STRING): nothing to stop" >&2
fi
