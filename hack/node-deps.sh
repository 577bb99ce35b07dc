#!/usr/bin/env bash
# Checks for what the real node (docs/testing.md "A real node") runs beside
# the kubelet hack/tools-node.sh builds: containerd, runc, the CNI plugins
# bridge, host-local and loopback, and a static busybox for the test images.
# As root, it installs what is missing with apt-get (Debian's containerd 1.6,
# runc, containernetworking-plugins and busybox-static); otherwise it names
# what is missing and exits 1.
#
# Prints nothing when everything is there, so make targets can call it on
# every run.
set -euo pipefail

packages=(containerd runc containernetworking-plugins busybox-static)

# The CNI plugin directories looked in, Debian's first. The real node takes
# the first that holds all three plugins (test/cluster.FindCNIBinDir).
cni_dirs=(/usr/lib/cni /opt/cni/bin)

missing() {
	local out=()
	command -v containerd >/dev/null || out+=(containerd)
	command -v ctr >/dev/null || out+=(containerd)
	command -v runc >/dev/null || out+=(runc)
	local d found=""
	for d in "${cni_dirs[@]}"; do
		if [[ -x "${d}/bridge" && -x "${d}/host-local" && -x "${d}/loopback" ]]; then
			found=1
			break
		fi
	done
	[[ -n "${found}" ]] || out+=(containernetworking-plugins)
	# Only a static busybox can be copied into an image as it is.
	if [[ ! -x /bin/busybox ]] || ! file_is_static /bin/busybox; then
		out+=(busybox-static)
	fi
	printf '%s\n' "${out[@]}" | sort -u | grep -v '^$' || true
}

# file_is_static PATH: PATH is an ELF executable without a program
# interpreter (no INTERP program header), so it needs no shared libraries.
# Without readelf (binutils), Debian's package status stands in for the check.
file_is_static() {
	if command -v readelf >/dev/null; then
		! LC_ALL=C readelf -lW "$1" 2>/dev/null | grep -q 'INTERP'
	else
		[[ "$(dpkg-query -W -f='${Status}' busybox-static 2>/dev/null)" == "install ok installed" ]]
	fi
}

main() {
	local need
	need="$(missing)"
	[[ -z "${need}" ]] && return 0
	# make runs this from more than one target (CI's background tools and
	# make test), and two apt-gets at once fail on dpkg's lock.
	exec 9>"${TMPDIR:-/tmp}/gms-node-deps.lock"
	flock 9
	need="$(missing)"
	[[ -z "${need}" ]] && return 0
	if [[ "$(id -u)" != 0 ]]; then
		echo "node-deps: missing: ${need//$'\n'/ }" >&2
		echo "node-deps: as root: apt-get install -y --no-install-recommends ${packages[*]}" >&2
		return 1
	fi
	local start=${SECONDS}
	echo "node-deps: installing ${need//$'\n'/ }" >&2
	# shellcheck disable=SC2086 # one package a word
	if ! DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends ${need}; then
		DEBIAN_FRONTEND=noninteractive apt-get update
		# shellcheck disable=SC2086
		DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends ${need}
	fi
	# Debian starts the containerd service it installs where systemd runs;
	# the real node runs its own containerd and needs no other.
	need="$(missing)"
	if [[ -n "${need}" ]]; then
		echo "node-deps: still missing after apt-get: ${need//$'\n'/ }" >&2
		return 1
	fi
	echo "node-deps: installed in $((SECONDS - start))s" >&2
}

main "$@"
