#!/usr/bin/env bash
# A small multi-process Ray cluster on this machine (a head node and N worker nodes, each
# its own raylet), for trying runner=cluster without real machines.
#
#   bash launchers/ray_local_cluster.sh start     # prints the address and how to use it
#   bash launchers/ray_local_cluster.sh status
#   bash launchers/ray_local_cluster.sh nodes     # one line per node: index, session, raylet pid
#   bash launchers/ray_local_cluster.sh kill-raylet K   # SIGKILL the raylet of worker node K (1..N)
#   bash launchers/ray_local_cluster.sh stop      # stops this cluster and nothing else
#
# Environment (all optional):
#   RAY_PORT           GCS port of the head (default 6380); the cluster is 127.0.0.1:RAY_PORT
#   RAY_WORKER_NODES   worker nodes besides the head (default 1)
#   RAY_NODE_CPUS      CPUs each node offers (default 1)
#   RAY_WORKER_RESOURCES  custom resources of each worker node, JSON (default
#                      {"evalkit_worker": 1000}: evalkit places its model workers on nodes
#                      offering evalkit_worker, so the head keeps only the driver; {} for none)
#   RAY_OBJECT_STORE   object store bytes per node (default 256 MiB)
#   RAY_CLUSTER_DIR    Ray's temp dir for this cluster: sessions, logs, sockets (default
#                      /tmp/evalkit-ray-RAY_PORT; keep it short, socket paths max 107 chars)
#   RAY_READY_TIMEOUT  seconds to wait for all nodes to register (default 180)
#   PY, RAY            the Python whose Ray and evalkit the nodes run (default .venv/bin/python)
#                      and a ray CLI to use instead of PY's (default: PY runs Ray's CLI)
#   RAY_AUTH_MODE      token (default) or disabled; with token, the token comes from
#                      RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token (made if missing)
#
# Every node is started in a session of its own (setsid), and the session ids are kept in
# RAY_CLUSTER_DIR/sessions. `stop` ends exactly the processes of those sessions (Ray's
# daemons and the workers their raylets spawned) and any process whose command line names
# RAY_CLUSTER_DIR — unlike `ray stop`, which ends every Ray process of the user on the
# machine (another cluster, a test's ray.init, a colleague's run).
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PY:-.venv/bin/python}
# the ray CLI of PY's environment, run by PY itself: a console script's shebang may name the
# Python of another environment (a copied virtualenv keeps the one it was made with), and
# the nodes' workers run the Python that ran `ray start`
if [[ -n ${RAY:-} ]]; then
  RAY_CMD=("$RAY")
else
  RAY_CMD=("$PY" -c 'import sys; from ray.scripts.scripts import main; sys.argv[0] = "ray"; sys.exit(main())')
fi
PORT=${RAY_PORT:-6380}
WORKERS=${RAY_WORKER_NODES:-1}
CPUS=${RAY_NODE_CPUS:-1}
WORKER_RESOURCES=${RAY_WORKER_RESOURCES:-'{"evalkit_worker": 1000}'}
STORE=${RAY_OBJECT_STORE:-268435456}
DIR=${RAY_CLUSTER_DIR:-/tmp/evalkit-ray-$PORT}
TIMEOUT=${RAY_READY_TIMEOUT:-180}
ADDRESS=127.0.0.1:$PORT
SESSIONS=$DIR/sessions
LOG=$DIR/start.log
SELF_SID=$(ps -o sid= -p $$ | tr -d ' ')

# Ray (2.60 here): `ray start --head` turns token authentication on by itself when a token
# exists, but a node or a driver given an explicit address only uses it when
# RAY_AUTH_MODE=token. Say it explicitly, so head, nodes and drivers agree.
export RAY_AUTH_MODE=${RAY_AUTH_MODE:-token}

die() {
  echo "ray_local_cluster: $*" >&2
  exit 1
}

free_port() {
  "$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

ensure_token() {
  [[ $RAY_AUTH_MODE == token && -z ${RAY_AUTH_TOKEN:-} ]] || return 0
  local path=${RAY_AUTH_TOKEN_PATH:-$HOME/.ray/auth_token}
  [[ -s $path ]] && return 0
  mkdir -p "$(dirname "$path")"
  (umask 077 && "$PY" -c 'import secrets, sys; sys.stdout.write(secrets.token_hex(32))' >"$path")
  echo "ray_local_cluster: made a Ray auth token in $path" >&2
}

# Processes of this cluster: those in the sessions `start` made, and any whose command
# line names the cluster's temp dir; never one of this script's own session.
cluster_pids() {
  local sids=""
  [[ -f $SESSIONS ]] && sids=" $(tr '\n' ' ' <"$SESSIONS") "
  ps -eo pid=,sid=,args= | awk -v sids="$sids" -v dir="$DIR/" -v self="$SELF_SID" '
    $2 != self && (index(sids, " " $2 " ") > 0 || index($0, dir) > 0) { print $1 }'
}

# One node, in a session of its own; records the session id (setsid execs in place: a
# background child of a script is never a process group leader, so its pid is the sid).
start_node() {
  setsid "${RAY_CMD[@]}" start "$@" >>"$LOG" 2>&1 </dev/null &
  local pid=$!
  echo "$pid" >>"$SESSIONS"
  if ! wait "$pid"; then
    echo "ray_local_cluster: 'ray start $*' failed; last lines of $LOG:" >&2
    tail -n 30 "$LOG" >&2
    stop_cluster >&2
    exit 1
  fi
}

wait_for_nodes() {
  "$PY" - "$ADDRESS" "$((WORKERS + 1))" "$TIMEOUT" <<'EOF'
import logging, sys, time

import ray

address, want, timeout = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
deadline = time.monotonic() + timeout
ray.init(address=address, log_to_driver=False, logging_level=logging.ERROR, include_dashboard=False)
alive = 0
while time.monotonic() < deadline:
    alive = sum(1 for n in ray.nodes() if n["Alive"])
    if alive >= want:
        sys.exit(0)
    time.sleep(1)
print(f"ray_local_cluster: {alive} of {want} nodes alive after {timeout:.0f}s", file=sys.stderr)
sys.exit(1)
EOF
}

# "index sid raylet-pid" of each node still running (index 0: the head, 1..N: worker nodes,
# in the order `start` made them; a node whose raylet is gone prints pid -)
list_nodes() {
  [[ -f $SESSIONS ]] || die "no cluster started with temp dir $DIR"
  local i=0 sid pid
  while read -r sid; do
    pid=$(ps -eo pid=,sid=,comm= | awk -v sid="$sid" '$2 == sid && $3 == "raylet" { print $1 }' | head -n 1)
    echo "$i $sid ${pid:--}"
    i=$((i + 1))
  done <"$SESSIONS"
}

kill_raylet() {
  local k=${1:-}
  [[ $k =~ ^[1-9][0-9]*$ ]] || die "kill-raylet needs a worker node index 1..N (0 is the head)"
  local pid
  pid=$(list_nodes | awk -v k="$k" '$1 == k { print $3 }')
  [[ -n $pid ]] || die "no worker node $k in this cluster"
  [[ $pid != - ]] || die "worker node $k has no raylet running"
  kill -KILL "$pid"
  echo "killed the raylet of worker node $k (pid $pid)"
}

stop_cluster() {
  local pids left
  pids=$(cluster_pids)
  if [[ -z $pids ]]; then
    echo "ray_local_cluster: no process of the cluster in $DIR is running"
    rm -f "$SESSIONS"
    return 0
  fi
  # shellcheck disable=SC2086  # one pid per word
  kill -TERM $pids 2>/dev/null || true
  for _ in $(seq 20); do # up to 10 s to exit on SIGTERM (gcs_server often does not)
    left=$(cluster_pids)
    [[ -z $left ]] && break
    sleep 0.5
  done
  if [[ -n $left ]]; then
    # shellcheck disable=SC2086
    kill -KILL $left 2>/dev/null || true
  fi
  for _ in $(seq 60); do
    left=$(cluster_pids)
    if [[ -z $left ]]; then
      rm -f "$SESSIONS"
      echo "ray_local_cluster: stopped the cluster at $ADDRESS (logs in $DIR)"
      return 0
    fi
    sleep 0.5
  done
  die "processes still running after SIGKILL: $left"
}

case "${1:-}" in
  start)
    [[ -n $(cluster_pids) ]] && die "a cluster with temp dir $DIR is already running (stop it first)"
    [[ $WORKERS =~ ^[0-9]+$ ]] || die "RAY_WORKER_NODES must be a number"
    mkdir -p "$DIR"
    : >"$SESSIONS"
    : >"$LOG"
    ensure_token
    common=(--node-ip-address=127.0.0.1 --num-cpus="$CPUS" --object-store-memory="$STORE"
      --temp-dir="$DIR" --disable-usage-stats --min-worker-port=0 --max-worker-port=0)
    # every listening port explicit or random, so the cluster never collides with another
    # Ray instance on the machine (default ports: dashboard 8265, agent 52365, workers 10002+)
    start_node --head --port="$PORT" --include-dashboard=false --dashboard-port="$(free_port)" \
      --dashboard-agent-listen-port="$(free_port)" "${common[@]}"
    for _ in $(seq "$WORKERS"); do
      start_node --address="$ADDRESS" --dashboard-agent-listen-port="$(free_port)" --resources="$WORKER_RESOURCES" "${common[@]}"
    done
    if ! wait_for_nodes >>"$LOG" 2>&1; then
      tail -n 5 "$LOG" >&2
      stop_cluster >&2
      die "the cluster did not come up"
    fi
    token_hint=""
    [[ $RAY_AUTH_MODE == token && -n ${RAY_AUTH_TOKEN_PATH:-} ]] && token_hint=" RAY_AUTH_TOKEN_PATH=$RAY_AUTH_TOKEN_PATH"
    cat <<EOF
cluster up: 1 head + $WORKERS worker node(s), $CPUS CPU(s) each, at $ADDRESS (Ray temp dir $DIR)
address=$ADDRESS
  export RAY_AUTH_MODE=$RAY_AUTH_MODE$token_hint
  python -m evalkit runner=cluster runner.address=$ADDRESS benchmark=... model=...
  RAY_PORT=$PORT RAY_CLUSTER_DIR=$DIR bash launchers/ray_local_cluster.sh stop
EOF
    ;;
  status)
    [[ -n $(cluster_pids) ]] || die "no cluster running with temp dir $DIR"
    "${RAY_CMD[@]}" status --address="$ADDRESS"
    ;;
  nodes)
    list_nodes
    ;;
  kill-raylet)
    kill_raylet "${2:-}"
    ;;
  stop)
    stop_cluster
    ;;
  *)
    echo "usage: $0 start|status|nodes|kill-raylet K|stop   (see the header of this file for the environment)" >&2
    exit 2
    ;;
esac
