# shellcheck shell=bash
# Sourced by start-master.sh, start-worker.sh and stop-all.sh; not run on its own.
#
# Resolves SPARK_HOME and the directories Spark's daemons write to:
#
#   PYTHON          interpreter whose pip-installed pyspark provides Spark (default: python3)
#   SPARK_HOME      default: the directory of that interpreter's pyspark package, i.e.
#                   python -c 'import pyspark,os;print(os.path.dirname(pyspark.__file__))'
#   CALVING_SPARK_DIR  parent of the default log/pid/work directories
#                   (default: $HOME/.calving-spark). pip's pyspark would otherwise write
#                   logs and work directories inside site-packages.
#   SPARK_LOG_DIR   daemon logs          (default: $CALVING_SPARK_DIR/logs)
#   SPARK_PID_DIR   daemon pid files     (default: $CALVING_SPARK_DIR/run)
#   SPARK_WORKER_DIR executors' work dirs (default: $CALVING_SPARK_DIR/work)
#   SPARK_IDENT_STRING  names the pid files (default: the user name, as Spark does)
#   SPARK_LOCAL_DIRS  Spark scratch directories (comma-separated): created if set
#   SPARK_NO_DAEMONIZE  if set, calving_launch runs the daemon in the foreground (exec)

calving_spark_env() {
  PYTHON=${PYTHON:-python3}
  if [ -z "${SPARK_HOME:-}" ]; then
    if ! SPARK_HOME=$("$PYTHON" -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))'); then
      echo "error: cannot import pyspark with $PYTHON; install calving's ingest extra" \
        "(pip install 'calving[ingest]') or set SPARK_HOME" >&2
      exit 1
    fi
  fi
  if [ ! -x "$SPARK_HOME/bin/spark-class" ] || [ ! -f "$SPARK_HOME/sbin/spark-daemon.sh" ]; then
    echo "error: SPARK_HOME=$SPARK_HOME has no bin/spark-class or sbin/spark-daemon.sh" >&2
    exit 1
  fi
  export SPARK_HOME

  CALVING_SPARK_DIR=${CALVING_SPARK_DIR:-${HOME:-/tmp}/.calving-spark}
  export SPARK_LOG_DIR=${SPARK_LOG_DIR:-$CALVING_SPARK_DIR/logs}
  export SPARK_PID_DIR=${SPARK_PID_DIR:-$CALVING_SPARK_DIR/run}
  export SPARK_WORKER_DIR=${SPARK_WORKER_DIR:-$CALVING_SPARK_DIR/work}
  export SPARK_IDENT_STRING=${SPARK_IDENT_STRING:-${USER:-$(id -nu)}}
  mkdir -p "$SPARK_LOG_DIR" "$SPARK_PID_DIR" "$SPARK_WORKER_DIR"
  # Spark's scratch directories (comma-separated), if set, e.g. on an emptyDir volume.
  if [ -n "${SPARK_LOCAL_DIRS:-}" ]; then
    local dirs dir
    IFS=, read -r -a dirs <<<"$SPARK_LOCAL_DIRS"
    for dir in "${dirs[@]}"; do mkdir -p "$dir"; done
  fi
}

# The first of `hostname -f`, `hostname`, `uname -n` that answers (Spark's own default
# for the master host is `hostname -f`).
calving_default_host() {
  hostname -f 2>/dev/null || hostname 2>/dev/null || uname -n
}

# calving_launch CLASS INSTANCE ARGS...: run a Spark daemon class.
# With SPARK_NO_DAEMONIZE set (containers, systemd Type=simple) the JVM replaces this
# shell in the foreground and logs to stdout; otherwise spark-daemon.sh starts it in
# the background with a pid file in SPARK_PID_DIR and a log in SPARK_LOG_DIR.
calving_launch() {
  local class=$1 instance=$2
  shift 2
  if [ -n "${SPARK_NO_DAEMONIZE:-}" ]; then
    exec "$SPARK_HOME/bin/spark-class" "$class" "$@"
  fi
  "$SPARK_HOME/sbin/spark-daemon.sh" start "$class" "$instance" "$@"
}
