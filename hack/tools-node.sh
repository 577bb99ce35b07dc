#!/usr/bin/env bash
# Builds what the real node runs (make tools-node, docs/testing.md "A real
# node") into bin/ (or $GMS_BIN_DIR): the kubelet and the images.
#
# The kubelet is k8s.io/kubernetes/cmd/kubelet at the
# release hack/tools.sh builds the control plane of, from the same tool
# module, test/tools. The kubelet is not in that module's tool block, so
# make tools does not build it: its module graph already holds every package
# the kubelet needs, and go build reads it as it is.
#
# A stamp named after a hash of test/tools's go.mod and go.sum marks a
# finished build; while it exists the script does nothing. It is named
# .kubelet-*, not .tools-*, because hack/tools.sh removes its own stamps
# before it rebuilds.
#
# The images are node-images.oci.tar, an OCI layout of a pause image and a
# workload image made of the static /bin/busybox (hack/node-deps.sh checks
# for it) by hack/image/nodeimage; it is rebuilt when that program (with
# internal/ocitar), its module or the busybox changes.
set -euo pipefail

kube_version="v1.37.2"

# The tool module stands alone; a go.work further up must not pull it in.
export GOWORK=off
export CGO_ENABLED=0

main() {
	local root bin_dir
	root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
	bin_dir="${GMS_BIN_DIR:-${root}/bin}"
	mkdir -p "${bin_dir}"
	bin_dir="$(cd "${bin_dir}" && pwd)"
	exec 9>"${bin_dir}/.kubelet.lock"
	flock 9
	build_kubelet
	build_images
}

build_kubelet() {
	local key stamp
	key="$(cd "${root}/test/tools" && cat go.mod go.sum | sha256sum | cut -c1-64)"
	stamp="${bin_dir}/.kubelet-${key}"
	if [[ -f "${stamp}" && -x "${bin_dir}/kubelet" ]]; then
		return 0
	fi
	local start=${SECONDS}
	echo "tools-node: building kubelet ${kube_version} into ${bin_dir} (a cold build takes about 12 minutes)" >&2
	rm -f "${bin_dir}"/.kubelet-*
	(
		cd "${root}/test/tools"
		go build -trimpath \
			-ldflags "-s -w -X k8s.io/component-base/version.gitVersion=${kube_version}" \
			-o "${bin_dir}/kubelet" k8s.io/kubernetes/cmd/kubelet
	)
	touch "${stamp}"
	echo "tools-node: kubelet done in $((SECONDS - start))s" >&2
}

build_images() {
	local key stamp tarball="${bin_dir}/node-images.oci.tar"
	key="$(cd "${root}/hack/image" && cat go.mod go.sum nodeimage/*.go internal/ocitar/*.go /bin/busybox | sha256sum | cut -c1-64)"
	stamp="${bin_dir}/.node-images-${key}"
	if [[ -f "${stamp}" && -f "${tarball}" ]]; then
		return 0
	fi
	rm -f "${bin_dir}"/.node-images-*
	(
		cd "${root}/hack/image"
		go run ./nodeimage --busybox=/bin/busybox --tarball="${tarball}"
	) >&2
	touch "${stamp}"
}

# Everything runs from functions, so the whole file is parsed before anything
# executes and editing it during a long build cannot derail the build.
main "$@"
