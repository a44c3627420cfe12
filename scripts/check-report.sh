#!/usr/bin/env bash
# Render the demo's HTML report in real headless Chromium, save a screenshot, and check
# that the browser's DOM holds what the report promises (the figures as HTML tables, one
# timeline per mode, the latency histogram and, with --forgetful, the chain-break histogram);
# and the same for the step to overload's page, step.html (its figures table, and goodput and
# admitted p99 per window for each step, every mode drawn and the step marked).
# Then the same for `hopbudget audit --html` (#50 item 10), on a clean fleet and two broken
# ones (the S7 graph generated with and without a forgetful hop; plain OpenTelemetry traces
# of the seeds' incident): Chromium lays each page out and scripts/check-audit-report.js,
# run in a copy of it, checks the call graph's nodes and their colour classes, the edge
# labels, the spike marked on a histogram, the work-for-nobody bars and the links from the
# findings to their traces.
#
#   scripts/check-report.sh [REPORT.html [SCREENSHOT.png]]
#   scripts/check-report.sh --audit      (the audit's pages only)
#
# Without a report it first runs a short demo (3 s per mode, --forgetful inventory) and a
# short step (1 s phases) into target/hopbudget-demo-check/ and checks both pages; a report
# named step.html is checked as a step page. Needs Chromium (`apt-get install -y chromium` on Debian;
# installed here when running as root). HEIGHT sets the window height (default 2400);
# SECTION=timeline (or figures, histogram, chain-break, cdf, waterfall, refusals, late-work,
# sweep) screenshots the page scrolled to that section.
set -euo pipefail
cd "$(dirname "$0")/.."

audit_only=0
if [ "${1:-}" = --audit ]; then
    audit_only=1
    shift
fi
report=${1:-}
shot=${2:-target/hopbudget-demo-check/report.png}
height=${HEIGHT:-2400}

if ! command -v chromium >/dev/null; then
    if [ "$(id -u)" = 0 ]; then
        { apt-get update -qq && apt-get install -y -qq chromium; } >/dev/null
    else
        echo "check-report: chromium not found; install it with: apt-get install -y chromium" >&2
        exit 2
    fi
fi

profile=$(mktemp -d)
trap 'rm -rf "$profile"' EXIT
chrome() {
    chromium --headless --no-sandbox --disable-gpu --disable-background-networking \
        --disable-component-update --disable-sync --no-first-run \
        --user-data-dir="$profile" "$@" 2>/dev/null
}

# `hopbudget audit --html` on FLEET's traces, rendered and checked against EXPECT (JSON, see
# scripts/check-audit-report.js).
check_audit() {
    local name=$1 traces=$2 expect=$3
    local dir=target/hopbudget-audit-check
    local page=$dir/$name.html checked=$dir/$name.checked.html
    # Exit status 1 is a chain break found: what the broken fleets are for.
    ./target/debug/hopbudget audit --html "$page" "$traces" >/dev/null || [ $? = 1 ]
    chrome --screenshot="$dir/$name.png" --window-size=1400,2400 "file://$(realpath "$page")" \
        >/dev/null
    [ -s "$dir/$name.png" ] || { echo "check-report: Chromium wrote no screenshot of $page" >&2; return 1; }
    { sed 's#</body></html>##' "$page"
      printf '<script>const EXPECT = %s;\n' "$expect"
      cat scripts/check-audit-report.js
      printf '</script></body></html>\n'; } >"$checked"
    local said
    said=$(chrome --dump-dom "file://$(realpath "$checked")" \
        | sed -n 's#.*<pre id="audit-check">\(.*\)</pre>.*#\1#p')
    if [ "$said" != "[]" ]; then
        echo "check-report: the audit's page for $name ($page): ${said:-no check ran}" >&2
        return 1
    fi
    echo "check-report: audit page for $name renders; screenshot $dir/$name.png"
}

audit_pages() {
    local dir=target/hopbudget-audit-check
    mkdir -p "$dir"
    cargo build --quiet -p hopbudget-cli --bin hopbudget
    ./target/debug/hopbudget gen-traces --spans 8000 "$dir/clean.jsonl" >/dev/null
    ./target/debug/hopbudget gen-traces --spans 8000 --forgetful inventory \
        "$dir/forgetful.jsonl" >/dev/null
    local s7='"edge-gateway","checkout-orchestrator","cart-svc","pricing","tax-calc","inventory","warehouse-router","reco-scorer"'
    local forwards
    forwards=$(tr ',' '\n' <<<"$s7" | sed 's/$/:"forwards"/' | paste -sd,)
    check_audit clean "$dir/clean.jsonl" \
        "{\"nodes\":{$forwards},\"edges\":7,\"spikes\":[],\"histograms\":8,\"nobody\":[],\"traces\":false}"
    check_audit forgetful "$dir/forgetful.jsonl" \
        "{\"nodes\":{${forwards/\"inventory\":\"forwards\"/\"inventory\":\"resets\"}},\"edges\":7,\"spikes\":[\"inventory\"],\"histograms\":8,\"nobody\":[],\"traces\":true}"
    check_audit plain-otel crates/hopbudget-cli/tests/fixtures/otel-python/plain-otel.jsonl.gz \
        '{"nodes":{"browser":"forwards","gateway":"resets","orchestrator":"forwards","inventory":"forwards"},"edges":3,"spikes":["gateway","orchestrator","inventory"],"histograms":3,"nobody":["gateway","inventory"],"traces":true}'
}

if [ "$audit_only" = 1 ]; then
    audit_pages
    exit
fi

step_report=
if [ -z "$report" ]; then
    out=target/hopbudget-demo-check
    cargo run --quiet -p hopbudget-demo -- demo --duration 3 --forgetful inventory \
        --out "$out" >/dev/null
    cargo run --quiet -p hopbudget-demo -- demo --step --step-phase 1 --out "$out" >/dev/null
    report=$out/report.html
    step_report=$out/step.html
elif [ "$(basename "$report")" = step.html ]; then
    step_report=$report
    report=
fi
for page in $report $step_report; do
    [ -f "$page" ] || { echo "check-report: no report at $page" >&2; exit 2; }
done
mkdir -p "$(dirname "$shot")"

fail=0
dom=
expect() {
    local what=$1 pattern=$2 min=$3
    local n
    # No match is a count of 0, not a failed pipeline (set -o pipefail).
    n=$(grep -o -- "$pattern" <<<"$dom" | wc -l || true)
    if [ "$n" -lt "$min" ]; then
        echo "check-report: expected at least $min $what in the rendered page, found $n" >&2
        fail=1
    fi
}
# Render `$1` into screenshot `$2` and read the browser's DOM into $dom.
render() {
    local url
    url="file://$(realpath "$1")"
    chrome --screenshot="$2" --window-size=1400,"$height" "$url${SECTION:+#$SECTION}" >/dev/null
    [ -s "$2" ] || { echo "check-report: Chromium wrote no screenshot of $1" >&2; exit 1; }
    dom=$(chrome --dump-dom "$url")
}

if [ -n "$report" ]; then
    render "$report" "$shot"
    expect "figure tables" '<table class="figures' 2
    expect "timeline panels" 'through the graph' 3
    expect "latency histogram" 'Latency histogram per mode' 1
    expect "inline charts" '<svg' 6
    if grep -q -- '--forgetful' <<<"$dom"; then
        expect "chain-break histogram" 'The chain break (S13)' 1
    fi
    [ "$fail" = 0 ] || exit 1
    echo "check-report: $report renders; screenshot $shot"
fi

if [ -n "$step_report" ]; then
    step_shot=$(dirname "$shot")/step.png
    render "$step_report" "$step_shot"
    expect "step figure table" '<table class="figures' 1
    for factor in 2 3; do
        expect "goodput chart of the ${factor}x step" "1x-${factor}x-1x: goodput per 50 ms window" 1
        expect "admitted p99 chart of the ${factor}x step" \
            "1x-${factor}x-1x: admitted p99 per 50 ms window" 1
        expect "step marks of the ${factor}x step" "step up to ${factor}x, and down" 2
    done
    expect "step charts" '<svg' 4
    expect "budget lines" '^budget [0-9]* ms$' 2
    # Every mode in each chart's legend (a text of its own line), and in the figures table
    # for each step.
    for mode in detached timeouts propagated; do
        expect "$mode in the chart legends" "^$mode\$" 4
        expect "$mode in the figures table" "<td>$mode</td>" 2
    done
    [ "$fail" = 0 ] || exit 1
    echo "check-report: $step_report renders; screenshot $step_shot"
fi
audit_pages
