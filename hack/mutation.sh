#!/usr/bin/env bash
# Mutation testing of the safety-critical files: hack/mutate changes one thing at a
# time (a guard never taken, ==/!=, </>=, >/<=, &&/|| turned over, a ! dropped) and
# runs the tests of the file's package against each change, then the simulation over
# 200 seeds against those the package's tests did not catch. It prints killed,
# survived and total per file and every survivor as file:line:col with the change. Not part of hack/test.sh or CI: it runs the tests
# once per mutant, hours in all (docs/development.md has the timings).
#   hack/mutation.sh                  # every file below
#   hack/mutation.sh pkg/cache/actual.go ...   # only these
#   hack/mutation.sh -list            # the mutants, without running anything
#   hack/mutation.sh -only pkg/cache/actual.go:120 pkg/cache/actual.go   # the mutants on one line
# Flags before the files go to hack/mutate (go run ./hack/mutate -h).
set -euo pipefail
cd "$(dirname "$0")/.."

files=(
	pkg/operationexecutor/executor.go
	pkg/operationexecutor/locks.go
	pkg/cache/actual.go
	pkg/cache/desired.go
	pkg/reconciler/decide.go
	pkg/statusupdater/statusupdater.go
	pkg/attachments/attachments.go
	pkg/controller/rebuild.go
	pkg/controller/startup.go
	pkg/controller/forget.go
)
flags=()
while [ $# -gt 0 ] && [[ $1 == -* ]]; do
	flags+=("$1")
	shift
done
[ $# -eq 0 ] || files=("$@")

# Its own copy of the command, so that runs over different files can go side by side.
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
go build -o "$bin/mutate" ./hack/mutate
nice -n 10 "$bin/mutate" -with './test/simulation -seeds=200' ${flags[@]+"${flags[@]}"} "${files[@]}"
