# shellcheck shell=bash
# Sourced by start-master.sh, start-worker.sh and stop-all.sh; not run on its own.
#
# Resolves SPARK_HOME and the directories Spark's daemons write to:
#
#   PYTHON          interpreter whose pip-installed pyspark provides Spark. Default: the
#                   first of these that imports pyspark and calving: the active
#                   virtualenv's ($VIRTUAL_ENV), the checkout's .venv, the interpreter of
#                   the `calving` command on PATH, python3 (calving_find_python)
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
#   CALVING_SPARK_AUTH_SECRET  if set: spark.authenticate=true for the daemon, with this
#                   shared secret handed to Spark in the daemon's environment (never on
#                   its command line). Master, workers and every driver need the same
#                   secret: see deploy/README.md, "Authentication".

# calving_find_python: set PYTHON, unless it is set, to the first interpreter that imports
# both pyspark and calving: $VIRTUAL_ENV/bin/python, the checkout's .venv/bin/python, the
# interpreter named on the first line of the `calving` command found on PATH (pip writes
# it there), python3. With none of them, PYTHON=python3 (and the caller's error names it).
calving_find_python() {
  if [ -n "${PYTHON:-}" ]; then return 0; fi
  local checkout first candidate
  checkout=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
  local candidates=()
  if [ -n "${VIRTUAL_ENV:-}" ]; then candidates+=("$VIRTUAL_ENV/bin/python"); fi
  candidates+=("$checkout/.venv/bin/python")
  if command -v calving >/dev/null 2>&1; then
    IFS= read -r first <"$(command -v calving)" || true
    if [[ $first == '#!/'* ]]; then candidates+=("${first#'#!'}"); fi
  fi
  candidates+=(python3)
  for candidate in "${candidates[@]}"; do
    if "$candidate" -c 'import pyspark, calving' >/dev/null 2>&1; then
      PYTHON=$candidate
      return 0
    fi
  done
  PYTHON=python3
}

calving_spark_env() {
  calving_find_python
  if [ -z "${SPARK_HOME:-}" ]; then
    if ! SPARK_HOME=$("$PYTHON" -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))'); then
      echo "error: cannot import pyspark with $PYTHON; install calving's ingest extra" \
        "(pip install 'calving[ingest]') or set PYTHON or SPARK_HOME" >&2
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

# calving_java_opt NAME KEY VALUE: append -DKEY=VALUE to the variable NAME (e.g.
# SPARK_MASTER_OPTS) and export it, unless NAME already sets KEY (the caller's value wins).
calving_java_opt() {
  local name=$1 key=$2 value=$3
  local current=${!name:-}
  case " $current " in
    *" -D$key="*) ;;
    *) printf -v "$name" '%s' "${current:+$current }-D$key=$value" ;;
  esac
  export "${name?}"
}

# calving_auth NAME: with CALVING_SPARK_AUTH_SECRET set, turn spark.authenticate on in the
# daemon options NAME and pass the secret the way Spark reads it from the environment
# (_SPARK_AUTH_SECRET; a worker hands it on to its executors the same way).
calving_auth() {
  if [ -n "${CALVING_SPARK_AUTH_SECRET:-}" ]; then
    calving_java_opt "$1" spark.authenticate true
    export _SPARK_AUTH_SECRET=$CALVING_SPARK_AUTH_SECRET
  fi
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
