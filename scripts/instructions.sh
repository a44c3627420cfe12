#!/usr/bin/env bash
# Instructions per request of the HTTP server layer and what it is compared with, counted by
# valgrind's callgrind, which repeats a count exactly whatever else the machine is doing.
#
#   scripts/instructions.sh [STACK ...]     (default: every stack; see benches/instructions.rs)
#
# Each stack runs twice, with SMALL and LARGE requests; the difference of the two totals over
# LARGE - SMALL is one request's instructions, with start-up and set-up cancelled out.
# FEATURES (default http,axum,metrics) are the hopbudget features the driver is built with;
# BIN=path counts an already built driver instead (an older build kept to compare with).
set -euo pipefail
cd "$(dirname "$0")/.."
command -v valgrind >/dev/null || { echo "valgrind is not installed (apt-get install valgrind)" >&2; exit 2; }
features=${FEATURES:-http,axum,metrics}
small=${SMALL:-2000}
large=${LARGE:-6000}
. scripts/bench_bin.sh
bin=${BIN:-$(bench_bin instructions "$features")}
stacks=("$@")
[ ${#stacks[@]} -gt 0 ] || stacks=(bare timeout layer bare-routed timeout-routed layer-routed
                                   app-bare app-timeout app-layer
                                   e2e-bare e2e-timeout e2e-trace e2e-layer e2e-layer-line
                                   e2e-bare-wait e2e-layer-wait e2e-bare-recorded e2e-layer-recorded
                                   client-bare client-timeout client-layer token)
count() {
    valgrind --tool=callgrind --callgrind-out-file=/dev/null "$bin" "$1" "$2" 2>&1 |
        sed -n 's/.*Collected : \([0-9]*\).*/\1/p'
}
declare -A per
printf '%-16s %12s\n' stack "instr/request"
for stack in "${stacks[@]}"; do
    # An unknown stack exits 2 with the list of stacks; under valgrind it would still count.
    "$bin" "$stack" 0 >/dev/null
    # A driver that fails under valgrind (a panic's backtrace alone is millions of
    # instructions) stops the run, named, instead of printing a count.
    a=$(count "$stack" "$small") || { echo "$stack: the driver failed under valgrind" >&2; exit 1; }
    b=$(count "$stack" "$large") || { echo "$stack: the driver failed under valgrind" >&2; exit 1; }
    [ -n "$a" ] && [ -n "$b" ] || { echo "$stack: no count from valgrind" >&2; exit 1; }
    per[$stack]=$(( (b - a) / (large - small) ))
    printf '%-16s %12d\n' "$stack" "${per[$stack]}"
done
# What each layer adds over its bare stack, measured in this same run.
added() {
    [ -n "${per[$2]:-}" ] && [ -n "${per[$3]:-}" ] || return 0
    printf '%-44s %+8d\n' "$1" $(( per[$3] - per[$2] ))
}
echo
added "server layer adds, end to end" e2e-bare e2e-layer
added "tower-http TimeoutLayer adds, end to end" e2e-bare e2e-timeout
added "tower-http TraceLayer adds, end to end" e2e-bare e2e-trace
added "server layer adds, its line on and unread" e2e-bare e2e-layer-line
added "server layer adds, handler waits once" e2e-bare-wait e2e-layer-wait
added "server layer adds, Prometheus recorder on" e2e-bare-recorded e2e-layer-recorded
added "instructions the client layer adds per call" client-bare client-layer
added "tower's Timeout adds per call" client-bare client-timeout
