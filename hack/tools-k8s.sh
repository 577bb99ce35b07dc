#!/usr/bin/env bash
# Builds the Kubernetes control plane of one other release for the
# compatibility smoke (make e2e-compat): kube-apiserver,
# kube-controller-manager, kube-scheduler and kubectl at VERSION into
# bin/k8s-VERSION/ (or $GMS_BIN_DIR/k8s-VERSION/). etcd, kwok, metrics-server
# and the LeaderWorkerSet controller are the ones hack/tools.sh builds; they
# do not change with the control plane's version.
#
# Each version has its own tool module, test/tools/k8s-VERSION, which requires
# k8s.io/kubernetes at VERSION and replaces every staging module with its
# v0.<minor>.<patch> release. A stamp named after a hash of that module's
# go.mod and go.sum marks a finished build.
#
#   hack/tools-k8s.sh v1.35.4 [v1.36.3 ...]
set -euo pipefail

export GOWORK=off
binaries=(kube-apiserver kube-controller-manager kube-scheduler kubectl)

up_to_date() {
	local dir=$1 stamp=$2 b
	[[ -f "${stamp}" ]] || return 1
	for b in "${binaries[@]}"; do
		[[ -x "${dir}/${b}" ]] || return 1
	done
}

build_version() {
	local version=$1
	local module="${root}/test/tools/k8s-${version}"
	if [[ ! -f "${module}/go.mod" ]]; then
		echo "tools-k8s: no tool module ${module} for ${version}" >&2
		return 1
	fi
	local dir="${bin_root}/k8s-${version}"
	mkdir -p "${dir}"
	local key
	key="$(cat "${module}/go.mod" "${module}/go.sum" | sha256sum | cut -c1-64)"
	local stamp="${dir}/.tools-${key}"
	if up_to_date "${dir}" "${stamp}"; then
		return 0
	fi

	exec 9>"${dir}/.tools.lock"
	flock 9
	if up_to_date "${dir}" "${stamp}"; then
		return 0
	fi
	local start=${SECONDS}
	echo "tools-k8s: building ${binaries[*]} ${version} into ${dir} (a cold build takes about 13 minutes)" >&2
	rm -f "${dir}"/.tools-*
	(
		cd "${module}"
		GOBIN="${dir}" go install -trimpath \
			-ldflags "-s -w -X k8s.io/component-base/version.gitVersion=${version}" tool
	)
	local b
	for b in "${binaries[@]}"; do
		if [[ ! -x "${dir}/${b}" ]]; then
			echo "tools-k8s: ${dir}/${b} was not built" >&2
			return 1
		fi
	done
	touch "${stamp}"
	echo "tools-k8s: ${version} done in $((SECONDS - start))s" >&2
}

main() {
	if [[ $# -eq 0 ]]; then
		echo "usage: $0 VERSION [VERSION ...] (for example v1.35.4)" >&2
		return 2
	fi
	root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
	bin_root="${GMS_BIN_DIR:-${root}/bin}"
	mkdir -p "${bin_root}"
	bin_root="$(cd "${bin_root}" && pwd)"
	local v
	for v in "$@"; do
		build_version "${v}"
	done
}

main "$@"
