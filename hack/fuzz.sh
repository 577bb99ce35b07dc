#!/usr/bin/env bash
# Runs every fuzz target under pkg/ for FUZZTIME each (default 10s).
# Crashers land in the package's testdata/fuzz and become regression seeds
# that plain `go test` replays from then on.
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime="${FUZZTIME:-10s}"
status=0
while IFS=: read -r file name; do
	pkg="./$(dirname "$file")"
	echo "fuzz: $pkg $name for $fuzztime"
	if ! go test -run='^$' -fuzz="^${name}\$" -fuzztime="$fuzztime" "$pkg"; then
		status=1
	fi
done < <(grep -rHoE '^func (Fuzz[A-Za-z0-9_]+)' --include='*_test.go' pkg | sed -E 's/func //' | sort)
exit "$status"
