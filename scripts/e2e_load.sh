#!/usr/bin/env bash
# End-to-end throughput of the HTTP server layer with a load generator in a process of its
# own: the second measure beside `cargo bench -p hopbudget --bench http_e2e`, whose hyper client shares the
# server's process and runtime.
#
#   scripts/e2e_load.sh                  wrk, server and wrk pinned to a core each (PIN=1)
#   LOADGEN=oha PIN=0 scripts/e2e_load.sh   oha, unpinned (oha then needs as much CPU as the server)
#
# ROUNDS=15, RUN_SECONDS=2, CONNECTIONS=32 by default, as in docs/performance.md.
#
# The bench serves its four axum servers (bare, TimeoutLayer, ServerBudgetLayer, TraceLayer)
# with HOPBUDGET_E2E_SERVE=1. In each round every layered server runs between two runs of the
# bare server and is compared with their mean; the figure is the median over rounds, as in
# the bench. Every request carries `x-request-timeout-ms: 500`.
#
# Two figures per server: requests per second, and the server process's CPU time per answered
# request. Unpinned on a 2-core machine, oha needs about as much CPU as the server, so the rate
# is partly the load generator's. wrk needs far less: with the server on core 0 and wrk on
# core 1 (PIN=1, which needs at least 2 cores and `taskset`) the server's core is saturated,
# and the rate is the server's own. The CPU per request says the same in either setup: what
# share of a saturated server's capacity a layer takes.
# FEATURES (default http,axum,metrics) are the hopbudget features the servers are built with.
set -euo pipefail
cd "$(dirname "$0")/.."
loadgen=${LOADGEN:-wrk}
case $loadgen in
    wrk) command -v wrk >/dev/null || { echo "wrk is not installed (apt-get install wrk)" >&2; exit 2; } ;;
    oha) command -v oha >/dev/null || { echo "oha is not installed (cargo install oha --locked)" >&2; exit 2; } ;;
    *) echo "LOADGEN must be wrk or oha, not $loadgen" >&2; exit 2 ;;
esac
pin=${PIN:-$([ "$loadgen" = wrk ] && echo 1 || echo 0)}
server_cpu=()
load_cpu=()
if [ "$pin" = 1 ]; then
    command -v taskset >/dev/null || { echo "PIN=1 needs taskset (util-linux)" >&2; exit 2; }
    [ "$(nproc)" -ge 2 ] || { echo "PIN=1 needs 2 cores; run with PIN=0" >&2; exit 2; }
    server_cpu=(taskset -c 0)
    load_cpu=(taskset -c 1)
fi
features=${FEATURES:-http,axum,metrics}
rounds=${ROUNDS:-15}
secs=${RUN_SECONDS:-2}
conns=${CONNECTIONS:-32}
. scripts/bench_bin.sh
bin=$(bench_bin http_e2e "$features")

listing=$(mktemp)
results=$(mktemp)
HOPBUDGET_E2E_SERVE=1 "${server_cpu[@]}" "$bin" >"$listing" &
server=$!
trap 'kill "$server" 2>/dev/null; rm -f "$listing" "$results"' EXIT
for _ in $(seq 300); do
    [ "$(wc -l <"$listing")" -ge 4 ] && break
    kill -0 "$server" 2>/dev/null || { echo "the servers exited before listening" >&2; exit 1; }
    sleep 0.1
done
mapfile -t names < <(cut -d' ' -f1 "$listing")
mapfile -t addrs < <(cut -d' ' -f2 "$listing")
[ "${#addrs[@]}" -eq 4 ] || { echo "expected 4 servers, got: $(cat "$listing")" >&2; exit 1; }

# The server process's CPU time so far, in clock ticks (user + system, every thread).
ticks() { awk '{ print $14 + $15 }' "/proc/$server/stat"; }
hz=$(getconf CLK_TCK)

# One run against one server: its requests per second, and the server's CPU time per answered
# request in microseconds (only one server is loaded at a time, so the process's CPU is its).
rps() {
    local t0 t1 out
    t0=$(ticks)
    if [ "$loadgen" = wrk ]; then
        out=$("${load_cpu[@]}" wrk -t1 -c "$conns" -d "${secs}s" \
            -H 'x-request-timeout-ms: 500' "http://$1/items/7")
    else
        out=$("${load_cpu[@]}" oha --no-tui --output-format json -z "${secs}s" -c "$conns" \
            -H 'x-request-timeout-ms: 500' "http://$1/items/7")
    fi
    t1=$(ticks)
    python3 -c 'import json,re,sys
out, loadgen = sys.argv[1], sys.argv[5]
if loadgen == "wrk":
    # wrk counts every answer in "N requests in", and those not 2xx/3xx again apart.
    answered = int(re.search(r"(\d+) requests in", out).group(1))
    rate = float(re.search(r"Requests/sec:\s*([\d.]+)", out).group(1))
    bad = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    if bad or "Socket errors" in out:
        sys.exit("wrk saw errors or non-2xx answers:\n" + out)
else:
    s = json.loads(out)
    answered = sum(s["statusCodeDistribution"].values())
    rate = s["summary"]["requestsPerSec"]
print(rate, 1e6 * (int(sys.argv[3]) - int(sys.argv[2])) / int(sys.argv[4]) / max(answered, 1))' \
        "$out" "$t0" "$t1" "$hz" "$loadgen"
}

# Warm every server up once.
for addr in "${addrs[@]}"; do rps "$addr" >/dev/null; done

for ((r = 0; r < rounds; r++)); do
    before=$(rps "${addrs[0]}")
    for ((k = 0; k < 3; k++)); do
        i=$((1 + (r + k) % 3))
        n=$(rps "${addrs[$i]}")
        after=$(rps "${addrs[0]}")
        echo "${names[$i]} $n $before $after" >>"$results"
        before=$after
    done
done
echo "$loadgen (pinned: $pin), $conns connections, $rounds rounds of ${secs} s per layered server, each between two of the bare server"
python3 - "$results" <<'EOF'
import sys
rows = {}
for line in open(sys.argv[1]):
    name, n, cpu, before, bcpu, after, acpu = line.split()
    rows.setdefault(name, []).append(
        (float(n), (float(before) + float(after)) / 2, float(cpu), (float(bcpu) + float(acpu)) / 2))
def quartiles(xs):
    xs = sorted(xs)
    at = lambda f: xs[round((len(xs) - 1) * f)]
    return f"{at(0.5):+.1f}% [{at(0.25):+.1f}%, {at(0.75):+.1f}%]"
mean = lambda xs: sum(xs) / len(xs)
print("server: req/s against bare; server CPU per request against bare (both: median of rounds [quartiles])")
for name, runs in rows.items():
    rate = [100 * (n / bare - 1) for n, bare, _, _ in runs]
    cpu = [100 * (c / bc - 1) for _, _, c, bc in runs]
    print(f"{name:<26} {mean([r[0] for r in runs]):>7.0f} req/s  {quartiles(rate)};  "
          f"{mean([r[2] for r in runs]):5.1f} us/req (bare {mean([r[3] for r in runs]):4.1f})  {quartiles(cpu)}")
EOF
