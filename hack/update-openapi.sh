#!/usr/bin/env bash
# Regenerates the OpenAPI definitions of the types served on metrics.k8s.io
# with the openapi-gen pinned in go.mod's tool block.
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-pkg/generated/openapi}"
go tool openapi-gen \
  --go-header-file hack/boilerplate.go.txt \
  --output-dir "$out" \
  --output-pkg github.com/group-metrics-server/group-metrics-server/pkg/generated/openapi \
  --output-file zz_generated.openapi.go \
  --report-filename /dev/null \
  --readonly-pkg k8s.io/metrics/pkg/apis/metrics/v1 \
  --readonly-pkg k8s.io/metrics/pkg/apis/metrics/v1beta1 \
  --readonly-pkg k8s.io/apimachinery/pkg/apis/meta/v1 \
  --readonly-pkg k8s.io/apimachinery/pkg/api/resource \
  --readonly-pkg k8s.io/apimachinery/pkg/runtime \
  --readonly-pkg k8s.io/apimachinery/pkg/version \
  k8s.io/metrics/pkg/apis/metrics/v1 \
  k8s.io/metrics/pkg/apis/metrics/v1beta1 \
  k8s.io/apimachinery/pkg/apis/meta/v1 \
  k8s.io/apimachinery/pkg/api/resource \
  k8s.io/apimachinery/pkg/runtime \
  k8s.io/apimachinery/pkg/version
