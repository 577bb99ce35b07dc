#!/usr/bin/env bash
# Runs every fuzz target under pkg/ for FUZZTIME each (default 10s).
# Crashers land in the package's testdata/fuzz and become regression seeds
# that plain `go test` replays from then on.
#
# Go's fuzzing coordinator (before Go 1.27, go.dev/issue/75804) can fail a
# target with a bare "context deadline exceeded" at the -fuzztime boundary on
# a loaded machine, having found nothing. A target that fails that way, with
# no failing input written, runs once more; a second failure, or any failure
# that wrote an input, fails the run.
#
# Each input that reaches new code is minimized before the fuzzer goes on,
# for up to -fuzzminimizetime, 60 s by default, and minimizing executions
# are not counted. In these packages' test binaries (client-go and the
# apiserver instrumented with them) a minimizing step is slow, so with the
# default a target whose inputs keep finding new code, as expfmt's parser
# does, spent nearly all its time minimizing: FuzzFilterMatchesFullParse ran
# 11 executions in 10 s, and with FUZZMINIMIZE's 100 steps 24,193
# (2026-12-06). A crasher is then minimized less, never lost.
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime="${FUZZTIME:-10s}"
minimize="${FUZZMINIMIZE:-100x}"
status=0
out="$(mktemp)"
trap 'rm -f "$out"' EXIT
while IFS=: read -r file name; do
	pkg="./$(dirname "$file")"
	for attempt in 1 2; do
		echo "fuzz: $pkg $name for $fuzztime, minimizing $minimize (attempt $attempt)"
		if go test -run='^$' -fuzz="^${name}\$" -fuzztime="$fuzztime" -fuzzminimizetime="$minimize" "$pkg" 2>&1 | tee "$out"; then
			break
		fi
		if [ "$attempt" = 1 ] && ! grep -q 'Failing input written to' "$out" && grep -q 'context deadline exceeded' "$out"; then
			echo "fuzz: $name stopped at the deadline without a failing input (go.dev/issue/75804); running it again"
			continue
		fi
		status=1
		break
	done
done < <(grep -rHoE '^func (Fuzz[A-Za-z0-9_]+)' --include='*_test.go' pkg | sed -E 's/func //' | sort)
exit "$status"
