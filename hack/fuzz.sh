#!/usr/bin/env bash
# Fuzzes each Go fuzz target of the repository (every func FuzzX in a fuzz_test.go
# under cmd/ and pkg/) in turn for DURATION (default 1m; go's -fuzztime syntax, so
# 10000x means ten thousand executions), then prints the executions and time of each
# target and the total. FUZZ_PARALLEL sets go's -parallel (fuzzing workers; default
# one per CPU). An input that fails is written by go under the package's
# testdata/fuzz/FuzzX/, where plain `go test` runs it from then on; the script goes on
# with the next target and exits non-zero at the end.
#
#   hack/fuzz.sh 5m
#   FUZZ_PARALLEL=1 nice -n 15 hack/fuzz.sh 10m   # on a shared machine
set -euo pipefail
cd "$(dirname "$0")/.."

duration=${1:-1m}
parallel=()
if [ -n "${FUZZ_PARALLEL:-}" ]; then
	parallel=(-parallel "$FUZZ_PARALLEL")
fi
log=$(mktemp)
trap 'rm -f "$log"' EXIT

results=()
total=0
failed=0
while IFS=: read -r file target; do
	pkg=./$(dirname "$file")
	echo "--- $target ($pkg), $duration"
	start=$(date +%s)
	status=ok
	if ! go test -run '^$' -fuzz "^${target}\$" -fuzztime "$duration" "${parallel[@]}" "$pkg" 2>&1 | tee "$log"; then
		status=FAIL
		failed=1
	fi
	seconds=$(($(date +%s) - start))
	execs=$(sed -n 's/.*execs: \([0-9]*\).*/\1/p' "$log" | tail -n 1)
	execs=${execs:-0}
	total=$((total + execs))
	results+=("$(printf '%-22s %-32s %12s execs %6ss %s' "$target" "$pkg" "$execs" "$seconds" "$status")")
done < <(grep -o '^func Fuzz[A-Za-z0-9_]*' $(find cmd pkg -name fuzz_test.go | sort) | sed 's/func //')

echo "--- executions per target"
printf '%s\n' "${results[@]}"
echo "total: $total executions"
exit "$failed"
