#!/usr/bin/env bash
# The demo's checkout call graph (crates/hopbudget-demo/topologies/checkout.yaml) as eight Go
# services that do not link hopbudget, each behind its own `hopbudget proxy`, on loopback
# (issue #37 item 3, rule C25):
#
#   client -> edge-gateway -> checkout-orchestrator -> cart-svc
#                                                   -> pricing -> tax-calc
#                                                   -> inventory -> warehouse-router -> reco-scorer
#
# Each service is interop/checkout_node: it does its own work (the topology's p50), then calls
# its children in parallel through its proxy's --egress, forwarding the trace context as an
# OpenTelemetry-instrumented service does. Its proxy tells it its budget in
# x-request-timeout-ms and restates what is left on each of its calls, so every hop is told
# less than its caller, by at least two margins (the egress's and the next proxy's), even
# below a service that forgets its deadline (--forgetful NAME, scenario S13).
#
#   examples/proxy_checkout.sh [--forgetful NAME] [--budget MS] [--requests N] [--leave-after MS]
#                              [--hopbudget BIN] [--node BIN] [--keep-logs]
#
# Sends, one after another, to edge-gateway's proxy: N requests (default 3) with a budget of
# MS (default 500) in x-request-timeout-ms; one with the same budget in which reco-scorer
# works 5 s, so the budget runs out there: its proxy ends its request at the deadline (Go
# cancels its r.Context()), the hops above are answered 504 and answer 504 in turn, and the
# client gets 504; and one with 5 s in which reco-scorer works 5 s again but the client leaves
# after 300 ms (--leave-after): every proxy on the way down sees its caller leave and ends its service's
# request, whose r.Context() Go cancels. For each request it prints per hop what the service
# was told, how its request ended, and what its proxy recorded.
#
# Builds target/release/hopbudget (cargo build --release -p hopbudget-cli) and the Go service
# (go build, GO111MODULE=off, no download) unless --hopbudget / --node name built ones; honours
# CARGO_TARGET_DIR. Needs go, curl and python3 (to pick free ports). Every process it starts is
# stopped when it exits; --keep-logs keeps the services' and proxies' output and says where.
# crates/hopbudget-cli/tests/fleet/checkout.rs runs it and checks what it prints.
set -euo pipefail

forgetful="" budget=500 requests=3 leave=300 bin="" node="" keep=0
usage() { sed -n '17,18p' "$0" | sed 's/^# //' >&2; exit 2; }  # the usage lines above
while [ $# -gt 0 ]; do
    case $1 in
        --forgetful) forgetful=${2:?--forgetful needs a service name}; shift 2 ;;
        --budget) budget=${2:?--budget needs milliseconds}; shift 2 ;;
        --requests) requests=${2:?--requests needs a count}; shift 2 ;;
        --leave-after) leave=${2:?--leave-after needs milliseconds}; shift 2 ;;
        --hopbudget) bin=${2:?--hopbudget needs a path}; shift 2 ;;
        --node) node=${2:?--node needs a path}; shift 2 ;;
        --keep-logs) keep=1; shift ;;
        -h|--help) usage ;;
        *) echo "proxy_checkout.sh: unknown argument $1" >&2; usage ;;
    esac
done

# The graph: name, own work in ms (the topology's p50), children. A child comes after its
# parent, so the services start from the end of the list (a parent needs its children's
# addresses); `depth` only indents the report.
names=(edge-gateway checkout-orchestrator cart-svc pricing tax-calc inventory warehouse-router reco-scorer)
declare -A work=([edge-gateway]=2 [checkout-orchestrator]=15 [cart-svc]=20 [pricing]=25
    [tax-calc]=15 [inventory]=40 [warehouse-router]=60 [reco-scorer]=5)
declare -A children=([edge-gateway]="checkout-orchestrator"
    [checkout-orchestrator]="cart-svc pricing inventory" [pricing]="tax-calc"
    [inventory]="warehouse-router" [warehouse-router]="reco-scorer")
declare -A depth=([edge-gateway]=0 [checkout-orchestrator]=1 [cart-svc]=2 [pricing]=2
    [tax-calc]=3 [inventory]=2 [warehouse-router]=3 [reco-scorer]=4)

# Paths given relative to where the script was started from.
case $bin in ""|/*) ;; *) bin=$PWD/$bin ;; esac
case $node in ""|/*) ;; *) node=$PWD/$node ;; esac
cd "$(dirname "$0")/.."

positive() { [[ $2 =~ ^[0-9]+$ ]] && [ "$2" -gt 0 ] || { echo "proxy_checkout.sh: $1 must be a positive whole number, not '$2'" >&2; exit 2; }; }
positive --budget "$budget"
positive --requests "$requests"
positive --leave-after "$leave"
if [ -n "$forgetful" ] && [ -z "${work[$forgetful]+x}" ]; then
    echo "proxy_checkout.sh: --forgetful $forgetful: no such service (one of: ${names[*]})" >&2
    exit 2
fi
for tool in curl python3; do
    command -v "$tool" >/dev/null || { echo "proxy_checkout.sh: $tool is not installed" >&2; exit 2; }
done

target=${CARGO_TARGET_DIR:-target}
if [ -z "$bin" ]; then
    cargo build -q --release -p hopbudget-cli
    bin=$target/release/hopbudget
fi
if [ -z "$node" ]; then
    command -v go >/dev/null || { echo "proxy_checkout.sh: go is not installed (apt-get install golang-go)" >&2; exit 2; }
    mkdir -p "$target/go"
    node=$(cd "$target/go" && pwd)/checkout_node
    (cd interop/checkout_node && GO111MODULE=off GOFLAGS= GOCACHE="$(dirname "$node")/cache" go build -o "$node" .)
fi
for program in "$bin" "$node"; do
    [ -x "$program" ] || { echo "proxy_checkout.sh: $program is not an executable" >&2; exit 2; }
done

dir=$(mktemp -d)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
    if [ "$keep" = 1 ]; then echo "logs kept in $dir"; else rm -rf "$dir"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# Wait until FILE has a line matching PATTERN (the process PID must stay up); print that line.
await_line() { # FILE PATTERN PID WHAT
    for _ in $(seq 1 500); do
        if grep -m1 -- "$2" "$1" 2>/dev/null; then return 0; fi
        kill -0 "$3" 2>/dev/null || { echo "proxy_checkout.sh: $4 exited:" >&2; cat "$1" "${1%.out}.log" >&2 2>/dev/null; exit 1; }
        sleep 0.02
    done
    echo "proxy_checkout.sh: $4 did not start in 10 s" >&2
    exit 1
}

declare -A proxy_at
for (( i=${#names[@]}-1; i>=0; i-- )); do
    name=${names[$i]}
    port=$(free_port)
    printf 'service: %s\n' "$name" >"$dir/$name.yaml"
    "$bin" proxy --listen 127.0.0.1:0 --admin 127.0.0.1:0 --egress 127.0.0.1:0 \
        --upstream "127.0.0.1:$port" --profile "$dir/$name.yaml" \
        >"$dir/$name.proxy.out" 2>"$dir/$name.proxy.log" &
    pids+=($!)
    listening=$(await_line "$dir/$name.proxy.out" '^listening on ' $! "the proxy of $name")
    egress=$(await_line "$dir/$name.proxy.out" '^egress on ' $! "the proxy of $name")
    proxy_at[$name]=$(echo "$listening" | awk '{print $3}' | tr -d ,)
    egress=$(echo "$egress" | awk '{print $3}' | tr -d ,)
    args=(-name "$name" -listen "127.0.0.1:$port" -work-ms "${work[$name]}" -egress "$egress")
    [ "$name" = "$forgetful" ] && args+=(-forget)
    for child in ${children[$name]:-}; do args+=(-call "http://${proxy_at[$child]}/$child"); done
    "$node" "${args[@]}" >"$dir/$name.out" 2>"$dir/$name.err" &
    pids+=($!)
    await_line "$dir/$name.out" '^port ' $! "the service $name" >/dev/null
    printf '  %-22s proxy %-16s egress %-16s service 127.0.0.1:%-6s work %s ms\n' \
        "$name" "${proxy_at[$name]}" "$egress" "$port" "${work[$name]}" >>"$dir/graph"
done
echo "checkout graph: ${#names[@]} Go services (interop/checkout_node), each behind its own hopbudget proxy"
tac "$dir/graph"
if [ -n "$forgetful" ]; then
    echo "  $forgetful forgets its deadline: it sends none on its calls (its proxy's egress restates it)"
fi
gateway=${proxy_at[edge-gateway]}

# Per hop: what its service printed for trace TRACE, and its proxy's `hop ended` line for the
# request, which names the trace (`trace_id`: each service forwards the trace id it got).
report() { # TRACE
    local name line told outcome status err recorded label
    for name in "${names[@]}"; do
        line="" recorded=""
        for _ in $(seq 1 250); do
            line=$(grep -m1 "trace=$1 " "$dir/$name.out" || true)
            recorded=$(grep -m1 "hop ended.* trace_id=$1" "$dir/$name.proxy.log" |
                grep -o 'outcome="[a-z]*"' | cut -d'"' -f2 || true)
            [ -n "$line" ] && [ -n "$recorded" ] && break
            sleep 0.02
        done
        label=$(printf '%*s%s' $((2 * depth[$name])) '' "$name")
        [ "$name" = "$forgetful" ] && label="$label (forgetful)"
        if [ -z "$line" ]; then
            printf '  %-36s never reached the service     proxy: %s\n' "$label" "${recorded:--}"
            continue
        fi
        told=$(echo "$line" | grep -o 'told=[^ ]*' | cut -d= -f2)
        outcome=$(echo "$line" | grep -o 'outcome=[^ ]*' | cut -d= -f2)
        status=$(echo "$line" | grep -o 'status=[^ ]*' | cut -d= -f2)
        err=$(echo "$line" | grep -o 'err=[^ ]*' | cut -d= -f2 | tr _ ' ' | sed 's/x-deadline-outcome: //' || true)
        case $outcome in
            ok) outcome="answered 200" ;;
            child-failed) outcome="answered $status: $err" ;;
            cancelled) outcome="cancelled: r.Context() ended ($err)" ;;
            late) outcome="finished after its request had ended ($status): its work was not stopped" ;;
        esac
        printf '  %-36s told %4s ms  proxy: %-9s  service: %s\n' "$label" "$told" "${recorded:--}" "$outcome"
    done
}

trace_id() { od -An -N16 -tx1 /dev/urandom | tr -d ' \n'; }

n=0
send() { # BUDGET QUERY DESCRIPTION [CURL ARGS...]
    local trace answer status outcome
    n=$((n + 1))
    trace=$(trace_id)
    answer=$(curl -s -o /dev/null -D - "${@:4}" -H "x-request-timeout-ms: $1" \
        -H "traceparent: 00-$trace-$(trace_id | cut -c1-16)-01" "http://$gateway/edge-gateway$2" || true)
    status=$(echo "$answer" | head -1 | awk '{print $2}')
    outcome=$(echo "$answer" | grep -i '^x-deadline-outcome:' | tr -d '\r' | awk '{print ", x-deadline-outcome: " $2}' || true)
    echo
    echo "request $n: x-request-timeout-ms: $1$3 -> ${status:-no answer}$outcome"
    report "$trace"
}

for _ in $(seq 1 "$requests"); do
    send "$budget" "" ""
done
send "$budget" "?slow=reco-scorer" ", reco-scorer works 5000 ms"
send 5000 "?slow=reco-scorer" ", reco-scorer works 5000 ms, the client leaves after $leave ms" \
    --max-time "$(awk "BEGIN {print $leave / 1000}")"
