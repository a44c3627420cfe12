# Sourced by the scripts here: builds one hopbudget bench and prints its executable's path.
#
#   bin=$(bench_bin NAME FEATURES)
bench_bin() {
    local bin
    bin=$(cargo bench -q -p hopbudget --features "$2" --bench "$1" --no-run \
            --message-format=json |
          python3 -c 'import json,sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == sys.argv[1] and m.get("executable"):
        print(m["executable"])' "$1")
    [ -n "$bin" ] || { echo "could not build the $1 bench" >&2; return 1; }
    echo "$bin"
}
