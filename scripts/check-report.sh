#!/usr/bin/env bash
# Render the demo's HTML report in real headless Chromium, save a screenshot, and check
# that the browser's DOM holds what the report promises (the figures as HTML tables, one
# timeline per mode, the latency histogram and, with --forgetful, the chain-break histogram);
# and the same for the step to overload's page, step.html (its figures table, and goodput and
# admitted p99 per window for each step, every mode drawn and the step marked).
#
#   scripts/check-report.sh [REPORT.html [SCREENSHOT.png]]
#
# Without a report it first runs a short demo (3 s per mode, --forgetful inventory) and a
# short step (1 s phases) into target/hopbudget-demo-check/ and checks both pages; a report
# named step.html is checked as a step page. Needs Chromium (`apt-get install -y chromium` on Debian;
# installed here when running as root). HEIGHT sets the window height (default 2400);
# SECTION=timeline (or figures, histogram, chain-break, cdf, waterfall, refusals, late-work,
# sweep) screenshots the page scrolled to that section.
set -euo pipefail
cd "$(dirname "$0")/.."

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

profile=$(mktemp -d)
trap 'rm -rf "$profile"' EXIT
chrome() {
    chromium --headless --no-sandbox --disable-gpu --disable-background-networking \
        --disable-component-update --disable-sync --no-first-run \
        --user-data-dir="$profile" "$@" 2>/dev/null
}

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
