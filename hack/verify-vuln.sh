#!/usr/bin/env bash
# Runs govulncheck (pinned in hack/tools/go.mod) on the server's binary, the
# one program the image ships (the server and the certificate controller),
# against a vulnerability database built here, without network access to the
# database's web service: the Go vulnerability database's OSV records come
# from a pinned snapshot of the golang.org/x/vulndb module (through the Go
# module proxy, checksummed like any module), and that module's own
# cmd/indexdb writes them in the database layout govulncheck reads with
# -db file://. The result is cached under bin/vulndb/<snapshot>/.
#
# Binary mode reads the binary's module versions and symbol table: it reports
# a vulnerable function when the linker kept it, which is the shipped code
# and nothing of the test harness, in seconds where source mode type-checked
# the whole graph once more (about 150 s of a cold CI run).
#
# Fails on every vulnerability the binary holds (symbol level), in a module
# or in the standard library, unless that vulnerability in that module
# version is listed in ACCEPTED below; and on an ACCEPTED entry that is no
# longer reported, so the list cannot outlive its reason.
# docs/security.md says how to move the snapshot forward.
set -euo pipefail
cd "$(dirname "$0")/.."

# The snapshot: a golang.org/x/vulndb pseudo-version, whose timestamp is the
# time of its newest record.
VULNDB_VERSION=v0.0.0-20261105234957-e22db6528018

# Reachable vulnerabilities waiting for an upgrade that is not made here,
# as "<ID> <module>@<version found>" ("stdlib" for the standard library),
# each with the reason. Print them on every run; remove each as its upgrade
# lands (the script says when).
ACCEPTED="
"

dbdir="${VULNDB_DIR:-$PWD/bin/vulndb/$VULNDB_VERSION}"
if [ ! -f "$dbdir/index/db.json" ]; then
	tmp="$(mktemp -d)"
	trap 'rm -rf "$tmp"' EXIT
	echo "verify-vuln: building the vulnerability database from golang.org/x/vulndb@$VULNDB_VERSION"
	src="$(cd "$tmp" && GOWORK=off GOFLAGS=-mod=mod go mod download -json "golang.org/x/vulndb@$VULNDB_VERSION" |
		sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
	if [ ! -d "$src/data/osv" ]; then
		echo "verify-vuln: golang.org/x/vulndb@$VULNDB_VERSION has no data/osv (got '$src')" >&2
		exit 1
	fi
	(cd "$tmp" && GOWORK=off go run "golang.org/x/vulndb/cmd/indexdb@$VULNDB_VERSION" -vulns "$src/data/osv" -out "$tmp/db")
	mkdir -p "$(dirname "$dbdir")"
	rm -rf "$dbdir"
	mv "$tmp/db" "$dbdir"
fi
stamp="${VULNDB_VERSION#v0.0.0-}"
stamp="${stamp%%-*}"
echo "verify-vuln: database snapshot of ${stamp:0:4}-${stamp:4:2}-${stamp:6:2} ${stamp:8:2}:${stamp:10:2} UTC," \
	"$(find "$dbdir/ID" -name '*.json' | wc -l) records, in $dbdir"

out="$(mktemp)"
trap 'rm -f "$out"; [ -z "${tmp:-}" ] || rm -rf "$tmp"' EXIT
set +e
bin="$(mktemp -d)/group-metrics-server"
go build -o "$bin" ./cmd/group-metrics-server &&
	go tool -modfile=hack/tools/go.mod govulncheck -db "file://$dbdir" -mode=binary "$bin" >"$out" 2>&1
rc=$?
rm -rf "$(dirname "$bin")"
set -e
cat "$out"
case "$rc" in
0 | 3) ;;
*)
	echo "verify-vuln: govulncheck failed (exit $rc)" >&2
	exit 1
	;;
esac

# One line per reachable vulnerability and module version it was found in.
found="$(awk '
	/^Vulnerability #[0-9]+: GO-/ { id = $3; next }
	/^  Module: / { mod = $2; next }
	/^  Standard library/ { mod = "stdlib"; next }
	/^    Found in: / { n = split($3, a, "@"); print id, mod "@" a[n] }
' "$out" | sort -u)"
accepted="$(grep -E '^GO-' <<<"$ACCEPTED" | sort -u || true)"
status=0
while read -r line; do
	[ -n "$line" ] || continue
	if grep -qxF "$line" <<<"$accepted"; then
		echo "verify-vuln: accepted until upgraded: $line"
	else
		echo "verify-vuln: reachable: $line; upgrade to the \"Fixed in\" version above" >&2
		status=1
	fi
done <<<"$found"
while read -r line; do
	[ -n "$line" ] || continue
	if ! grep -qxF "$line" <<<"$found"; then
		echo "verify-vuln: no longer reported, remove it from ACCEPTED in hack/verify-vuln.sh: $line" >&2
		status=1
	fi
done <<<"$accepted"
if [ "$rc" -eq 3 ] && [ -z "$found" ]; then
	echo "verify-vuln: govulncheck reported vulnerabilities this script could not read" >&2
	status=1
fi
if [ "$status" -eq 0 ]; then
	if [ -z "$accepted" ]; then
		echo "verify-vuln: nothing reachable ($(go env GOVERSION))"
	else
		echo "verify-vuln: nothing reachable but the $(wc -l <<<"$accepted") accepted entries above ($(go env GOVERSION))"
	fi
fi
exit "$status"
