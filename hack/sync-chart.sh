#!/usr/bin/env bash
# Copies the alert rules and the Grafana dashboard from manifests/monitoring/, where
# they are edited, into the Helm chart, which can only read files inside its own
# directory. TestChartFilesMatchManifests (test/chart) fails until this has been run
# after a change.
#   hack/sync-chart.sh
set -euo pipefail
cd "$(dirname "$0")/.."
for f in rules.yaml dashboard.json; do
	cp manifests/monitoring/$f charts/attachdetach-controller/files/$f
done
