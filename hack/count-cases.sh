#!/usr/bin/env bash
# Counts the test cases of the tree at a revision (default: the working
# tree), so that a change to the tests can show it lost none:
#
#   hack/count-cases.sh [REV]
#
# It prints, per area, the top-level Test, Fuzz, Benchmark and Example
# functions (what `go test -list .` lists, TestMain left out) and the cases
# of the two e2e fault tables (TestNodeFaults' rounds, TestUkpdFaults'
# cases), counted from the tables' source. It reads files only; it builds
# and runs nothing, so it can count an old revision as quickly as this one.
#
# Subtests are counted by running: `go test -count=1 -json PKG | hack/count-cases.sh --json`
# prints how many tests and subtests passed, failed and were skipped.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "${1:-}" = "--json" ]; then
	# go test -json: one "pass", "fail" or "skip" action per test or subtest.
	grep -o '"Action":"\(pass\|fail\|skip\)","Package":"[^"]*","Test":"[^"]*"' |
		sed 's/"Action":"\([a-z]*\)","Package":"\([^"]*\)".*/\2 \1/' | sort | uniq -c |
		awk '{print; n[$3] += $1} END {for (a in n) printf "%s total: %d\n", a, n[a]}'
	exit 0
fi

root=.
if [ -n "${1:-}" ]; then
	root="$(mktemp -d)"
	trap 'rm -rf "$root"' EXIT
	git archive "$1" | tar -x -C "$root"
fi

# funcs: top-level test functions in the NUL-separated files on stdin.
funcs() {
	xargs -0 grep -hE '^func (Test|Fuzz|Benchmark|Example)[A-Z0-9_]?[A-Za-z0-9_]*\(' |
		grep -vE '^func TestMain\(' |
		sed -E 's/^func (Test|Fuzz|Benchmark|Example).*/\1/' | sort | uniq -c |
		awk '{printf "%s=%s ", $2, $1; n += $1} END {printf "total=%d\n", n}'
}

# between FILE START END PATTERN: how often PATTERN occurs in FILE from the
# first line matching START to the next line matching END.
between() {
	awk -v start="$2" -v end="$3" '$0 ~ start {on = 1} on && $0 ~ end && seen {exit} on {print; seen = 1}' "$1" |
		grep -oE "$4" | wc -l | tr -d ' '
}

cd "$root"
echo "pkg, cmd (unit):     $(find pkg cmd -name '*_test.go' -print0 | funcs)"
echo "test/ but the suite: $(find test -name '*_test.go' \( ! -path 'test/e2e/*' -o -path 'test/e2e/env/*' \) -print0 | funcs)"
echo "e2e suite (test/e2e): $(find test/e2e -maxdepth 1 -name '*_test.go' -print0 | funcs)"
echo "hack:                $(find hack -name '*_test.go' -print0 | funcs)"
kubelet=$(between test/e2e/faults_test.go 'rounds := ' 'began := time.Now\(\)' '(^|[^A-Za-z])fault\(')
ukpd=$(between test/e2e/faults_ukpd_test.go 'cases := \[\]faultCase\{' 'began := time.Now\(\)' '(^|[^A-Za-z])(transport|handler)\(')
echo "e2e fault cases:     TestNodeFaults=$kubelet TestUkpdFaults=$ukpd total=$((kubelet + ukpd))"
