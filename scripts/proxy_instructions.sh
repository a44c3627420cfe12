#!/usr/bin/env bash
# Instructions per request of `hopbudget proxy` and of nginx as a reverse proxy, counted by
# valgrind's callgrind on the proxy's own process while a fixed number of requests pass over
# one keep-alive connection (#37 item 5). Callgrind repeats a count exactly whatever else the
# machine is doing, which a shared machine's wall-clock and CPU timings do not.
#
#   scripts/proxy_instructions.sh [TARGET ...]   (default: nginx floor proxy proxy-no-hop-log)
#
# `floor` is the bare hyper proxy of benches/proxy_overhead.rs (the bench executable run with
# PROXY_OVERHEAD_FLOOR_UPSTREAM): hyper's server and client connections and nothing else, the
# least any proxy on hyper and tokio runs per request.
#
# Each target runs twice, with SMALL and LARGE requests; (LARGE total - SMALL total) /
# (LARGE - SMALL) is one request's instructions, start-up and shut-down cancelled out.
# The upstream is an nginx answering `ok` itself (not counted); the requests come from a
# Python client (not counted), each with `x-request-timeout-ms: 20000`: a budget valgrind's
# slowdown (50 times, more while a path is first translated) cannot spend.
# BIN (default: target/release/hopbudget, built here) is the proxy; KEEP=DIR keeps the
# callgrind files of the LARGE runs there for `callgrind_annotate --inclusive=yes`.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v valgrind >/dev/null || { echo "valgrind is not installed (apt-get install valgrind)" >&2; exit 2; }
command -v nginx >/dev/null || { echo "nginx is not installed (apt-get install nginx-light)" >&2; exit 2; }
small=${SMALL:-500}
large=${LARGE:-2500}
if [ -z "${BIN:-}" ]; then
    cargo build -q --release -p hopbudget-cli
    BIN=${CARGO_TARGET_DIR:-target}/release/hopbudget
fi
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(nginx floor proxy proxy-no-hop-log)
floor_bin() {
    cargo bench -q -p hopbudget-cli --bench proxy_overhead --no-run --message-format=json 2>/dev/null |
        python3 -c 'import json,sys
for l in sys.stdin:
    m=json.loads(l)
    if m.get("reason")=="compiler-artifact" and m["target"]["name"]=="proxy_overhead" and m.get("executable"): print(m["executable"])'
}
for t in "${targets[@]}"; do
    if [ "$t" = floor ] && [ -z "${FLOOR_BIN:-}" ]; then FLOOR_BIN=$(floor_bin); fi
done
dir=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$dir"; }
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_port() {
    for _ in $(seq 1 600); do
        (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
        sleep 0.1
    done
    echo "nothing listens on $1" >&2; return 1
}
nginx_conf() { # NAME PORT BODY
    local p="$dir/$1"; mkdir -p "$p"
    cat >"$p/nginx.conf" <<CONF
daemon off; master_process off; worker_processes 1; pid $p/nginx.pid;
error_log $p/error.log warn; events { worker_connections 1024; }
http {
  access_log off; keepalive_requests 100000000;
  client_body_temp_path $p/body; proxy_temp_path $p/proxy; fastcgi_temp_path $p/fastcgi;
  uwsgi_temp_path $p/uwsgi; scgi_temp_path $p/scgi;
  $3
}
CONF
    echo "$p"
}

up_port=$(free_port)
up=$(nginx_conf upstream "$up_port" "server { listen 127.0.0.1:$up_port; location / { return 200 ok; } }")
nginx -p "$up" -c "$up/nginx.conf" 2>/dev/null & pids+=($!)
wait_port "$up_port"

# N requests over one keep-alive connection; exits non-zero unless every answer is 200.
send() {
    python3 - "$1" "$2" <<'PY'
import http.client, sys
port, n = int(sys.argv[1]), int(sys.argv[2])
c = http.client.HTTPConnection("127.0.0.1", port)
for _ in range(n):
    c.request("GET", "/", headers={"x-request-timeout-ms": "20000"})
    r = c.getresponse(); r.read()
    if r.status != 200: sys.exit(f"status {r.status}")
PY
}

count() { # TARGET N
    local port out pid
    port=$(free_port)
    out="$dir/callgrind.$1.$2"
    local vg=(valgrind --tool=callgrind --callgrind-out-file="$out")
    case $1 in
        nginx)
            local p
            p=$(nginx_conf "ngx$2" "$port" "upstream service { server 127.0.0.1:$up_port; keepalive 64; keepalive_requests 100000000; }
  server { listen 127.0.0.1:$port; location / { proxy_http_version 1.1; proxy_set_header Connection \"\"; proxy_pass http://service; } }")
            "${vg[@]}" nginx -p "$p" -c "$p/nginx.conf" 2>"$dir/vg.log" & pid=$!;;
        floor)
            PROXY_OVERHEAD_FLOOR_UPSTREAM="127.0.0.1:$up_port" "${vg[@]}" "$FLOOR_BIN" \
                >"$dir/floor.out" 2>"$dir/vg.log" & pid=$!
            # It binds port 0 and says where.
            for _ in $(seq 1 600); do
                port=$(sed -n 's/^listening on 127.0.0.1:\([0-9]*\),.*/\1/p' "$dir/floor.out")
                [ -n "$port" ] && break
                sleep 0.1
            done;;
        proxy|proxy-no-hop-log)
            local extra=()
            [ "$1" = proxy-no-hop-log ] && extra=(--no-hop-log)
            "${vg[@]}" "$BIN" proxy --listen "127.0.0.1:$port" --admin 127.0.0.1:0 \
                --upstream "127.0.0.1:$up_port" "${extra[@]}" >/dev/null 2>"$dir/vg.log" & pid=$!;;
        *) echo "unknown target $1 (nginx, floor, proxy, proxy-no-hop-log)" >&2; exit 2;;
    esac
    wait_port "$port"
    send "$port" "$2" || { echo "$1: requests failed; the target's log:" >&2; grep -v '^==' "$dir/vg.log" | tail -5 >&2; kill "$pid"; exit 1; }
    # nginx without a master stops on QUIT gracefully; the proxy on TERM after draining.
    # The floor has no clean stop: TERM ends it, and callgrind still writes its counts.
    if [ "$1" = nginx ]; then kill -QUIT "$pid"; else kill -TERM "$pid"; fi
    wait "$pid" || true
    # Every thread's file (callgrind.out-NN with --separate-threads off is one file).
    cat "$out"* | sed -n 's/^summary: *\([0-9]*\).*/\1/p' |
        awk '{s+=$1} END {print s}'
    [ -n "${KEEP:-}" ] && [ "$2" = "$large" ] && mkdir -p "$KEEP" && cp "$out"* "$KEEP/" || true
}

# A count is exact for the code that ran, but what runs varies a little with timing (a read
# that finds its bytes already there or parks first, the metrics' upkeep every 5 s falling
# inside a run or not): REPEAT pairs (default 3), their median.
repeat=${REPEAT:-3}
printf '%-18s %14s   %s\n' target "instr/request" "(each pair)"
for t in "${targets[@]}"; do
    per=()
    for _ in $(seq 1 "$repeat"); do
        a=$(count "$t" "$small")
        b=$(count "$t" "$large")
        [ -n "$a" ] && [ -n "$b" ] || { echo "$t: no count from valgrind" >&2; exit 1; }
        per+=($(( (b - a) / (large - small) )))
    done
    median=$(printf '%s\n' "${per[@]}" | sort -n | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}')
    printf '%-18s %14d   %s\n' "$t" "$median" "${per[*]}"
done
