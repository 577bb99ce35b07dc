#!/usr/bin/env bash
# Builds the control-plane binaries used by the e2e suite and the demo into
# bin/ (or $GMS_BIN_DIR): etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler, kubectl, kwok, metrics-server and lws-controller (the
# LeaderWorkerSet controller), and helm.
#
# The binaries come from the tool modules under test/tools, and helm from
# hack/helm (it needs k8s.io modules of another minor). A stamp file named
# after a hash of those modules' go.mod and go.sum files marks a finished
# build; while it exists the script does nothing. helm has a stamp of its
# own, so that a change to one module rebuilds only its binaries.
set -euo pipefail

kube_version="v1.37.2"
metrics_server_version="v0.8.0"
lws_version="v0.9.0"
helm_version="v4.3.2"
binaries=(etcd kube-apiserver kube-controller-manager kube-scheduler kubectl kwok metrics-server lws-controller)

# The tool modules stand alone; a go.work further up must not pull them in.
export GOWORK=off

up_to_date() {
	[[ -f "${stamp}" ]] || return 1
	local b
	for b in "${binaries[@]}"; do
		[[ -x "${bin_dir}/${b}" ]] || return 1
	done
}

build() {
	local start=${SECONDS}
	echo "tools: building ${binaries[*]} into ${bin_dir} (a cold build takes about 15 minutes)" >&2
	rm -f "${bin_dir}"/.tools-*

	(
		cd "${root}/test/tools"
		GOBIN="${bin_dir}" go install -trimpath \
			-ldflags "-s -w -X k8s.io/component-base/version.gitVersion=${kube_version}" tool
	)
	mv -f "${bin_dir}/server" "${bin_dir}/etcd"

	(
		cd "${root}/test/tools/metrics-server"
		GOBIN="${bin_dir}" go install -trimpath \
			-ldflags "-s -w -X k8s.io/client-go/pkg/version.gitVersion=${metrics_server_version}" tool
	)

	# The LeaderWorkerSet controller's main package is sigs.k8s.io/lws/cmd.
	# Its module requires test/tools's versions of every module both use
	# (k8s.io v0.37.2 and controller-runtime v0.25.3 rather than LWS v0.9.0's
	# v0.36.2 and v0.24.1), so a cold build compiles one Kubernetes library
	# graph for it and the control plane. metrics-server keeps v0.8.0's own
	# k8s.io v0.33.2: built against v0.37 it fails at start ("cannot find
	# model definition" for its OpenAPI types) and gains two generic flags.
	(
		cd "${root}/test/tools/lws"
		GOBIN="${bin_dir}" go install -trimpath \
			-ldflags "-s -w -X sigs.k8s.io/lws/pkg/version.GitVersion=${lws_version}" tool
	)
	mv -f "${bin_dir}/cmd" "${bin_dir}/lws-controller"

	local b
	for b in "${binaries[@]}"; do
		if [[ ! -x "${bin_dir}/${b}" ]]; then
			echo "tools: ${bin_dir}/${b} was not built" >&2
			return 1
		fi
	done

	touch "${stamp}"
	echo "tools: done in $((SECONDS - start))s" >&2
}

helm_up_to_date() {
	[[ -f "${helm_stamp}" && -x "${bin_dir}/helm" ]]
}

build_helm() {
	local start=${SECONDS}
	echo "tools: building helm ${helm_version} into ${bin_dir}" >&2
	rm -f "${bin_dir}"/.helm-*
	(
		cd "${root}/hack/helm"
		GOBIN="${bin_dir}" go install -trimpath \
			-ldflags "-s -w -X helm.sh/helm/v4/internal/version.version=${helm_version}" tool
	)
	if [[ ! -x "${bin_dir}/helm" ]]; then
		echo "tools: ${bin_dir}/helm was not built" >&2
		return 1
	fi
	touch "${helm_stamp}"
	echo "tools: helm done in $((SECONDS - start))s" >&2
}

main() {
	root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
	bin_dir="${GMS_BIN_DIR:-${root}/bin}"
	mkdir -p "${bin_dir}"
	bin_dir="$(cd "${bin_dir}" && pwd)"

	local key
	key="$(cd "${root}/test/tools" &&
		cat go.mod go.sum metrics-server/go.mod metrics-server/go.sum lws/go.mod lws/go.sum |
		sha256sum | cut -c1-64)"
	stamp="${bin_dir}/.tools-${key}"
	key="$(cd "${root}/hack/helm" && cat go.mod go.sum | sha256sum | cut -c1-64)"
	helm_stamp="${bin_dir}/.helm-${key}"

	if up_to_date && helm_up_to_date; then
		return 0
	fi

	# Serialise concurrent runs (two make targets in parallel, say).
	exec 9>"${bin_dir}/.tools.lock"
	flock 9
	if ! up_to_date; then
		build
	fi
	if ! helm_up_to_date; then
		build_helm
	fi
}

# Everything runs from functions, so the whole file is parsed before anything
# executes and editing it during a long build cannot derail the build.
main "$@"
