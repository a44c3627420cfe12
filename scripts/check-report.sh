#!/usr/bin/env bash
# Render the demo's HTML report in real headless Chromium, save a screenshot, and check
# that the browser's DOM holds what the report promises (the figures as HTML tables, one
# timeline per mode, the latency histogram and, with --forgetful, the chain-break histogram).
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
# Without a report it first runs a short demo (3 s per mode, --forgetful inventory) into
# target/hopbudget-demo-check/. Needs Chromium (`apt-get install -y chromium` on Debian;
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

if [ -z "$report" ]; then
    out=target/hopbudget-demo-check
    cargo run --quiet -p hopbudget-demo -- demo --duration 3 --forgetful inventory \
        --out "$out" >/dev/null
    report=$out/report.html
fi
[ -f "$report" ] || { echo "check-report: no report at $report" >&2; exit 2; }
mkdir -p "$(dirname "$shot")"
url="file://$(realpath "$report")"

chrome --screenshot="$shot" --window-size=1400,"$height" "$url${SECTION:+#$SECTION}" >/dev/null
[ -s "$shot" ] || { echo "check-report: Chromium wrote no screenshot" >&2; exit 1; }

dom=$(chrome --dump-dom "$url")
fail=0
expect() {
    local what=$1 pattern=$2 min=$3
    local n
    n=$(grep -o -- "$pattern" <<<"$dom" | wc -l)
    if [ "$n" -lt "$min" ]; then
        echo "check-report: expected at least $min $what in the rendered page, found $n" >&2
        fail=1
    fi
}
expect "figure tables" '<table class="figures' 2
expect "timeline panels" 'through the graph' 3
expect "latency histogram" 'Latency histogram per mode' 1
expect "inline charts" '<svg' 6
if grep -q -- '--forgetful' <<<"$dom"; then
    expect "chain-break histogram" 'The chain break (S13)' 1
fi
[ "$fail" = 0 ] || exit 1
echo "check-report: $report renders; screenshot $shot"
audit_pages
