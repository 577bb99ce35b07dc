#!/usr/bin/env bash
# Counts the test cases of the tree at a revision (default: the working
# tree), so that a change to the tests can show it lost none:
#
#   hack/count-cases.sh [REV]
#
# It prints, per area, the top-level Test, Fuzz, Benchmark and Example
# functions (what `go test -list .` lists, TestMain left out), and the fault
# cases of both layers, counted from the tables' source: those of the two
# e2e fault tables (TestNodeFaults' rounds, TestUkpdFaults' cases), those of
# the in-process fault tables of the kubelet and ukpd clients, and, per
# client, the fault kinds each layer names, so that a change that moves a
# case from one layer to the other shows it lost none. It reads files only;
# it builds and runs nothing, so it can count an old revision as quickly as
# this one.
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
	region "$1" "$2" "$3" | { grep -oE "$4" || true; } | wc -l | tr -d ' '
}

# region FILE START END: FILE from the first line matching START to the next
# line matching END; nothing if FILE is missing.
region() {
	[ -f "$1" ] || return 0
	awk -v start="$2" -v end="$3" '$0 ~ start {on = 1} on && $0 ~ end && seen {exit} on {print; seen = 1}' "$1"
}

# fileOf DIR FUNC: the test file of DIR that defines FUNC, wherever the
# tests were moved ("" if none).
fileOf() {
	grep -lE "^func $2\\(" "$1"/*_test.go 2>/dev/null | head -1 || true
}

# cases FILE FUNC: the cases of the table test FUNC in FILE, one "name:"
# each, from the function's start to its loop over them.
cases() {
	between "$1" "^func $2\\(" 'range tests' 'name: +"'
}

# named: the fault kinds the Go source on stdin names, one a line, as often
# as it names them: fakecore's and the fakes' Fault* constants, and the
# constructors Slow, HugeBody and ClockBackwards. kinds: each once, sorted.
named() {
	{ grep -oE '(^|[^A-Za-z])Fault[A-Z][A-Za-z0-9]*|fakecore\.(Slow|HugeBody|ClockBackwards)\(' || true; } |
		sed -E 's/^[^A-Za-z]//; s/^fakecore\.//; s/\($//; s/^Fault//' | { grep -vxE 'Kind' || true; }
}
kinds() { named | sort -u; }

# words LIST: the newline-separated LIST as "n (a b c)".
words() {
	printf '%s' "$1" | awk 'NF {n++; s = s (n > 1 ? " " : "") $0} END {printf "%d (%s)", n, s}'
}

cd "$root"
echo "pkg, cmd (unit):     $(find pkg cmd -name '*_test.go' -print0 | funcs)"
echo "test/ but the suite: $(find test -name '*_test.go' \( ! -path 'test/e2e/*' -o -path 'test/e2e/env/*' \) -print0 | funcs)"
echo "e2e suite (test/e2e): $(find test/e2e -maxdepth 1 -name '*_test.go' -print0 | funcs)"
echo "hack:                $(find hack -name '*_test.go' -print0 | funcs)"

# The e2e tables: one fault kind named per case, from the tables' fault
# constructors to the loop that runs them.
e2eKubelet() { region "$(fileOf test/e2e TestNodeFaults)" 'fault := func\(' 'began := time.Now\(\)'; }
e2eUkpd() { region "$(fileOf test/e2e TestUkpdFaults)" 'u := suite.ukpd' 'began := time.Now\(\)'; }
kubelet=$(e2eKubelet | named | wc -l | tr -d ' ')
ukpd=$(e2eUkpd | named | wc -l | tr -d ' ')
echo "e2e fault cases:     TestNodeFaults=$kubelet TestUkpdFaults=$ukpd total=$((kubelet + ukpd))"

# The in-process tables of the two clients.
k=pkg/sources/kubelet u=pkg/sources/ukpd
kFail=$(cases "$(fileOf $k TestClientFailures)" TestClientFailures)
kData=$(cases "$(fileOf $k TestDataFaults)" TestDataFaults)
uFail=$(cases "$(fileOf $u TestClientFailures)" TestClientFailures)
uTransport=$(cases "$(fileOf $u TestClientTransportFaults)" TestClientTransportFaults)
uData=$(cases "$(fileOf $u TestScrapeDataFaults)" TestScrapeDataFaults)
echo "in-process fault cases: kubelet TestClientFailures=$kFail TestDataFaults=$kData" \
	"ukpd TestClientFailures=$uFail TestClientTransportFaults=$uTransport TestScrapeDataFaults=$uData" \
	"total=$((kFail + kData + uFail + uTransport + uData))"

# Per client, the fault kinds each layer names: every kind an e2e table
# dropped must be named in-process. The in-process tests of a client are
# its package's.
for c in kubelet ukpd; do
	if [ $c = kubelet ]; then e2e=$(e2eKubelet | kinds) dir=$k; else e2e=$(e2eUkpd | kinds) dir=$u; fi
	in=$(cat $dir/*_test.go | kinds)
	echo "fault kinds, $c:"
	echo "  e2e:                 $(words "$e2e")"
	echo "  in-process:          $(words "$in")"
	echo "  e2e, not in-process: $(words "$(comm -23 <(printf '%s\n' "$e2e") <(printf '%s\n' "$in"))")"
	echo "  either layer:        $(words "$(printf '%s\n%s\n' "$e2e" "$in" | sort -u)")"
done
