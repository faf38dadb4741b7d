#!/usr/bin/env bash
# Start or stop a small multi-process Ray cluster on 127.0.0.1 (a head node and one worker
# node), for trying runner=cluster on one machine. Usage: ray_local_cluster.sh start|stop
# Note: `stop` is `ray stop --force`, which stops every Ray process of this user on the machine.
set -euo pipefail
cd "$(dirname "$0")/.."
RAY=${RAY:-.venv/bin/ray}
PORT=${RAY_PORT:-6380}
case "${1:-}" in
  start)
    "$RAY" start --head --node-ip-address=127.0.0.1 --port="$PORT" --num-cpus=1 --include-dashboard=false --disable-usage-stats
    "$RAY" start --address="127.0.0.1:$PORT" --node-ip-address=127.0.0.1 --num-cpus=1 --disable-usage-stats
    echo "cluster up: runner=cluster runner.address=127.0.0.1:$PORT"
    ;;
  stop)
    "$RAY" stop --force
    ;;
  *)
    echo "usage: $0 start|stop" >&2
    exit 2
    ;;
esac
