#!/usr/bin/env bash
# Fails when the generated OpenAPI definitions differ from what the pinned
# generator produces now.
set -euo pipefail
cd "$(dirname "$0")/.."
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
bash hack/update-openapi.sh "$tmp"
if ! diff -u pkg/generated/openapi/zz_generated.openapi.go "$tmp/zz_generated.openapi.go"; then
  echo "pkg/generated/openapi is stale: run 'make update-openapi'" >&2
  exit 1
fi
