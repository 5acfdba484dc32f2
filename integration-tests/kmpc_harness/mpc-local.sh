#!/usr/bin/env bash
# Three MPC servers on 127.0.0.1, each with its own ports, store and log.
#
#   integration-tests/kmpc_harness/mpc-local.sh start DIR [BASE_PORT] [WORKERS]
#   integration-tests/kmpc_harness/mpc-local.sh stop DIR
#   integration-tests/kmpc_harness/mpc-local.sh status DIR
#
# Party i serves gRPC on BASE_PORT+i and the ring on BASE_PORT+10+i; its
# store is DIR/store-i, its log DIR/party-i.log, its pid DIR/party-i.pid.
# Certificates are generated into DIR/certs on first start. `start` waits
# for every server's "listening" line and prints the --servers value.
# Servers are stopped by the PIDs recorded here, never by name.
# KMPC_MPC_METRICS_BASE=PORT: party i also serves Prometheus /metrics on
# 127.0.0.1:PORT+i (--metrics_addr).
# Every party dials from 127.0.0.1, which each server is told as its
# --ring_next (the neighbour's handshake slots, as in a deployment).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cmd=${1:-}; dir=${2:-}
[ -n "$cmd" ] && [ -n "$dir" ] || { echo "usage: $0 start|stop|status DIR [BASE_PORT] [WORKERS]" >&2; exit 2; }

find_bin() {  # KMPC_MPC_BIN_DIR, else the most recently built candidate
  if [ -n "${KMPC_MPC_BIN_DIR:-}" ]; then echo "$KMPC_MPC_BIN_DIR"; return; fi
  local best="" d
  for d in "${KMPC_BUILD:-$root/build}/cmake/mpc-server" "$root/build/cmake/mpc-server" \
           "$root/build/cmake-c/mpc-server"; do
    [ -x "$d/kmpc-mpc-server" ] || continue
    if [ -z "$best" ] || [ "$d/kmpc-mpc-server" -nt "$best/kmpc-mpc-server" ]; then best=$d; fi
  done
  [ -n "$best" ] || { echo "mpc-local: kmpc-mpc-server not built (make build)" >&2; exit 1; }
  echo "$best"
}

# A base port whose six ports (gRPC base..base+2, ring base+10..base+12) are
# free, below the kernel's ephemeral range when it can be (clients'
# outgoing ports, of which a login storm holds thousands, come from there).
pick_base() {
  local lo hi b p ok try
  command -v ss >/dev/null || { echo "mpc-local: ss (iproute2) is needed to pick free ports" >&2; return 1; }
  read -r lo hi < /proc/sys/net/ipv4/ip_local_port_range
  for try in $(seq 200); do
    b=$((10000 + RANDOM % 20000))
    if [ "$try" -le 100 ] && [ $((b + 12)) -ge "$lo" ] && [ "$b" -le "$hi" ]; then continue; fi
    ok=1
    for p in $b $((b + 1)) $((b + 2)) $((b + 10)) $((b + 11)) $((b + 12)); do
      # Not `ss | grep -q`: under pipefail a SIGPIPE'd ss makes a busy port look free.
      if [ -n "$(ss -Htan "sport = :$p")" ]; then ok=0; break; fi
    done
    if [ "$ok" = 1 ]; then echo "$b"; return 0; fi
  done
  echo "mpc-local: no free base port found" >&2
  return 1
}

# A zombie whose threads have all exited is not running: the servers
# outlive this script, so init reaps them, possibly a second or more later.
# (The main thread shows as a zombie while the others still exit.)
running() {
  kill -0 "$1" 2>/dev/null || return 1
  local st tasks
  st=$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null) || return 1
  [ "${st%% *}" != Z ] && return 0
  tasks=(/proc/"$1"/task/*)
  [ "${#tasks[@]}" -gt 1 ]
}

stop_all() {
  local pids=() i pidf pid
  for i in 0 1 2; do
    pidf="$dir/party-$i.pid"
    [ -f "$pidf" ] || continue
    pid=$(cat "$pidf")
    if running "$pid"; then kill -TERM "$pid" 2>/dev/null || true; pids+=("$pid"); fi
  done
  # All three stop together: as long as the slowest, not the sum.
  for pid in "${pids[@]}"; do
    for _ in $(seq 100); do running "$pid" || break; sleep 0.05; done
    running "$pid" && kill -KILL "$pid" 2>/dev/null || true
  done
  for i in 0 1 2; do rm -f "$dir/party-$i.pid"; done
}

case "$cmd" in
  start)
    base=${3:-}
    [ -n "$base" ] || base=$(pick_base) || exit 1
    workers=${4:-2}
    bin=$(find_bin)
    mkdir -p "$dir"
    [ -f "$dir/certs/ca.pem" ] || bash "$root/deploy/gen-certs.sh" "$dir/certs" >/dev/null
    stop_all
    # Revocation: the CRL gen-certs.sh keeps beside the CA (--revoke updates it).
    crl=()
    [ -f "$dir/certs/crl.pem" ] && crl=(--crl="$dir/certs/crl.pem")
    for i in 0 1 2; do
      prev=$(( (i + 2) % 3 ))
      mpc_flags=${KMPC_MPC_FLAGS:-}  # "{party}" in a flag becomes $i
      metrics=()
      [ -n "${KMPC_MPC_METRICS_BASE:-}" ] && \
        metrics=(--metrics_addr=127.0.0.1:$((KMPC_MPC_METRICS_BASE + i)))
      : > "$dir/party-$i.log"
      "$bin/kmpc-mpc-server" --party=$i --listen=127.0.0.1:$((base + i)) \
        --ring_listen=127.0.0.1:$((base + 10 + i)) \
        --ring_prev=127.0.0.1:$((base + 10 + prev)) \
        --ring_next=127.0.0.1 \
        --cert="$dir/certs/party-$i.pem" --key="$dir/certs/party-$i.key" \
        --ca="$dir/certs/ca.pem" --store_dir="$dir/store-$i" \
        --workers="$workers" --cts_releases_per_minute=0 --gate_decrypts_per_run=0 "${crl[@]}" "${metrics[@]}" ${mpc_flags//\{party\}/$i} >>"$dir/party-$i.log" 2>&1 &
      echo $! > "$dir/party-$i.pid"
    done
    for i in 0 1 2; do
      for _ in $(seq 100); do
        grep -q "listening on" "$dir/party-$i.log" && break
        running "$(cat "$dir/party-$i.pid")" || { cat "$dir/party-$i.log" >&2; stop_all; exit 1; }
        sleep 0.1
      done
      grep -q "listening on" "$dir/party-$i.log" || { cat "$dir/party-$i.log" >&2; stop_all; exit 1; }
    done
    echo "127.0.0.1:$base,127.0.0.1:$((base + 1)),127.0.0.1:$((base + 2))" > "$dir/servers"
    cat "$dir/servers"
    ;;
  stop) stop_all ;;
  status)
    for i in 0 1 2; do
      pidf="$dir/party-$i.pid"
      if [ -f "$pidf" ] && running "$(cat "$pidf")"; then echo "party $i: running (pid $(cat "$pidf"))"
      else echo "party $i: stopped"; fi
    done ;;
  *) echo "unknown command $cmd" >&2; exit 2 ;;
esac
