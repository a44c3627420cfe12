#!/usr/bin/env bash
# Render the demo's HTML report in real headless Chromium, save a screenshot, and check
# that the browser's DOM holds what the report promises (the figures as HTML tables, one
# timeline per mode, the latency histogram and, with --forgetful, the chain-break histogram).
#
#   scripts/check-report.sh [REPORT.html [SCREENSHOT.png]]
#
# Without a report it first runs a short demo (3 s per mode, --forgetful inventory) into
# target/hopbudget-demo-check/. Needs Chromium (`apt-get install -y chromium` on Debian;
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

if [ -z "$report" ]; then
    out=target/hopbudget-demo-check
    cargo run --quiet -p hopbudget-demo -- demo --duration 3 --forgetful inventory \
        --out "$out" >/dev/null
    report=$out/report.html
fi
[ -f "$report" ] || { echo "check-report: no report at $report" >&2; exit 2; }
mkdir -p "$(dirname "$shot")"
url="file://$(realpath "$report")"

profile=$(mktemp -d)
trap 'rm -rf "$profile"' EXIT
chrome() {
    chromium --headless --no-sandbox --disable-gpu --disable-background-networking \
        --disable-component-update --disable-sync --no-first-run \
        --user-data-dir="$profile" "$@" 2>/dev/null
}

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
