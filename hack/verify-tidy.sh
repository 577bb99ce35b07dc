#!/usr/bin/env bash
# Checks that go.mod and go.sum are tidy in every module of the repository.
# The modules are tidied at once, each in a copy of its directory's go.mod
# and go.sum, since from an empty module cache the time goes to downloads.
set -euo pipefail
cd "$(dirname "$0")/.."
modules=(. hack/tools hack/helm hack/image test/tools test/tools/metrics-server test/tools/lws
	test/tools/k8s-v1.35.4 test/tools/k8s-v1.36.3 test/hpacalc test/monitoring)
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

# tidy MODULE OUT: go mod tidy -diff of MODULE, its output in OUT.
tidy() {
	(cd "$1" && GOWORK=off go mod tidy -diff) >"$2" 2>&1
}

pids=()
for i in "${!modules[@]}"; do
	tidy "${modules[$i]}" "$tmp/$i" &
	pids+=($!)
done
status=0
for i in "${!modules[@]}"; do
	if ! wait "${pids[$i]}"; then
		echo "${modules[$i]}: go mod tidy changes go.mod/go.sum:"
		cat "$tmp/$i"
		status=1
	fi
done
exit "$status"
