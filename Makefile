# group-metrics-server. `make help` lists the targets.
SHELL := /usr/bin/env bash
GO ?= go
BIN_DIR ?= $(CURDIR)/bin
TOOLS := $(GO) tool -modfile=hack/tools/go.mod
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X github.com/group-metrics-server/group-metrics-server/cmd/group-metrics-server/app.Version=$(VERSION)
# The image: $(REGISTRY)/group-metrics-server:$(IMAGE_TAG). The tag is the
# version, so a release tag (v0.1.0) builds the image manifests/base names.
REGISTRY ?= ghcr.io/group-metrics-server
IMAGE_TAG ?= $(VERSION)
IMAGE ?= $(REGISTRY)/group-metrics-server:$(IMAGE_TAG)
IMAGE_ARCHS ?= amd64 arm64
comma := ,
IMAGE_DIR ?= $(BIN_DIR)/image
IMAGE_SOURCE ?= https://github.com/group-metrics-server/group-metrics-server
# Every file and the image are dated at the commit (or SOURCE_DATE_EPOCH),
# so one commit builds one digest.
SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct 2>/dev/null || echo 0)
REVISION ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
E2E_TIMEOUT ?= 45m
E2E_SHARDS ?= 5
# make soak: how long TestChurn churns (Go duration, 1m to 24h).
SOAK_DURATION ?= 1h
FUZZTIME ?= 10s
BENCH_COUNT ?= 6
# The release hack/tools.sh builds into bin/, and those make e2e-compat runs
# (docs/compatibility.md).
KUBE_VERSION := v1.37.2
COMPAT_VERSIONS ?= v1.35.4 v1.36.3 v1.37.2
COMPAT_TESTS := ^(TestControlPlaneRelease|TestKubectlTop|TestHPAScales|TestLWSGroupAutoscaling)$$

export GMS_BIN_DIR := $(BIN_DIR)

# Every target builds with the Go that go.mod's toolchain line names (a
# patch release whose standard library has the security fixes; make
# verify-vuln holds the build to it), fetched by the go command through the
# module proxy on first use. GOTOOLCHAIN=local make ... keeps the installed Go.
export GOTOOLCHAIN ?= $(shell sed -n 's/^toolchain //p' go.mod)

# Every build is static and path-free, as the image's binary must be
# (make image-binaries): one build configuration for go vet, the tests, the
# server, the image and the control-plane tools, so each package compiles once
# and every later step finds it in the build cache. The race detector needs
# cgo, so the race build (RACE_PKGS) is the one other configuration.
export CGO_ENABLED ?= 0
export GOFLAGS += -trimpath
# The packages whose tests run with the race detector in make test-unit:
# those that own goroutines and state shared between them (the scrape loop,
# the store, the value cache, the group rule) and whose test builds do not
# hold client-go, whose race build alone would cost more than the rest of
# the unit stage (docs/testing.md). The pod cache and the certificate
# controller run on client-go's informers and leader election, so they are
# left to make test-race, which runs every package with it.
RACE_PKGS := ./pkg/sources ./pkg/sources/promscrape ./pkg/store ./pkg/group

.PHONY: help
help: ## Show the targets.
	@grep -hE '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | sed -E 's/:.*## /\t/' | expand -t 20

.PHONY: build
build: ## Build bin/group-metrics-server.
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN_DIR)/group-metrics-server ./cmd/group-metrics-server

.PHONY: image-binaries
image-binaries: ## Static linux binaries for IMAGE_ARCHS into $(IMAGE_DIR)/linux-<arch>/.
	@for arch in $(IMAGE_ARCHS); do \
		echo "build linux/$$arch"; \
		CGO_ENABLED=0 GOOS=linux GOARCH=$$arch $(GO) build -trimpath -ldflags "-s -w $(LDFLAGS)" \
			-o $(IMAGE_DIR)/linux-$$arch/group-metrics-server ./cmd/group-metrics-server || exit 1; \
	done

IMAGE_ARGS = --image=$(IMAGE) --created=$(SOURCE_DATE_EPOCH) --source=$(IMAGE_SOURCE) --revision=$(REVISION) --version=$(VERSION) \
	$(foreach a,$(IMAGE_ARCHS),--platform=linux/$(a)=$(IMAGE_DIR)/linux-$(a)/group-metrics-server)

.PHONY: image
image: image-binaries ## The multi-arch OCI image, without Docker: $(IMAGE_DIR)/oci (layout) and $(IMAGE_DIR)/group-metrics-server.oci.tar (for ctr images import / kind load image-archive).
	cd hack/image && GOWORK=off $(GO) run . $(IMAGE_ARGS) --layout=$(IMAGE_DIR)/oci --tarball=$(IMAGE_DIR)/group-metrics-server.oci.tar

.PHONY: image-push
image-push: image-binaries ## Push the image to $(REGISTRY) (credentials from the Docker config, as crane uses them).
	cd hack/image && GOWORK=off $(GO) run . $(IMAGE_ARGS) --push

.PHONY: tools
tools: ## Build the control-plane binaries (etcd, kube-*, kubectl, kwok, metrics-server) and helm into bin/, once.
	bash hack/tools.sh

.PHONY: tools-node
tools-node: ## What the e2e suite's real node runs, into bin/, once: the kubelet (hack/tools-node.sh, not in make tools) and its images; hack/node-deps.sh first checks for containerd, runc, the CNI plugins and busybox (as root it installs them).
	bash hack/node-deps.sh
	bash hack/tools-node.sh

.PHONY: test
test: test-unit test-chart e2e ## Everything CI runs: unit and in-process tests (every fuzz target's seed corpus among them), the Helm chart, then the e2e suite.

.PHONY: test-unit
test-unit: ## Unit and in-process tests (RACE_PKGS with the race detector); then the HPA's own calculator on group values (test/hpacalc), the monitoring kit's rules and queries (test/monitoring) and the image builder for this machine's platform (hack/image).
	$(GO) test -count=1 $$($(GO) list ./... | grep -vxF "$$($(GO) list $(RACE_PKGS))")
	CGO_ENABLED=1 $(GO) test -race -count=1 $(RACE_PKGS)
	cd test/hpacalc && GOWORK=off $(GO) test -count=1 -v ./...
	cd test/monitoring && GOWORK=off $(GO) test -count=1 -v ./...
	cd hack/image && GOWORK=off $(GO) test -count=1 -timeout 30m -v ./...

.PHONY: test-race
test-race: ## Every package's unit tests with the race detector (a second build of the whole graph; not in make test).
	CGO_ENABLED=1 $(GO) test -race -count=1 ./...

.PHONY: verify-image
verify-image: ## The image builder's test for every platform make image ships (IMAGE_ARCHS): cross builds, so not in make test-unit.
	cd hack/image && GOWORK=off $(GO) test -count=1 -timeout 30m -v -run '^TestImage$$' ./... -args -archs=$(subst $(eval ) ,$(comma),$(IMAGE_ARCHS))

.PHONY: test-chart
test-chart: tools ## helm lint and template of the chart for every example values file, its schema, and the chart against manifests/.
	$(GO) test -tags chart -count=1 -v ./test/chart/

.PHONY: fuzz-short
fuzz-short: ## Run every fuzz target for FUZZTIME (default 10s), minimizing new inputs FUZZMINIMIZE steps (default 100x); not in make test, whose unit tests replay every seed and past crasher.
	FUZZTIME=$(FUZZTIME) bash hack/fuzz.sh

.PHONY: fuzz
fuzz: ## Longer fuzzing: every target for 5 minutes.
	FUZZTIME=5m bash hack/fuzz.sh

.PHONY: e2e
e2e: tools tools-node build ## The e2e suite on real local control planes and a real node (as root), in E2E_SHARDS processes at once (hack/e2e.sh; E2E_RUN picks tests).
	E2E_SHARDS=$(E2E_SHARDS) E2E_TIMEOUT=$(E2E_TIMEOUT) bash hack/e2e.sh

.PHONY: e2e-node
e2e-node: tools tools-node build ## Only the e2e test on the real node, TestRealNode: a kubelet and containerd beside the kwok nodes (as root; docs/testing.md "A real node").
	$(GO) test -tags e2e -count=1 -timeout 20m -v -run '^TestRealNode$$' ./test/e2e/

.PHONY: soak
soak: tools tools-node build ## TestChurn for SOAK_DURATION (default 1h) instead of 3 minutes, logging the server's memory every tenth of it; not in make test (docs/reliability.md).
	GMS_CHURN_DURATION=$(SOAK_DURATION) E2E_SHARDS=1 E2E_TIMEOUT=25h E2E_RUN=TestChurn bash hack/e2e.sh

.PHONY: tools-compat
tools-compat: ## Build the control planes of COMPAT_VERSIONS into bin/k8s-<version>/, once each.
	bash hack/tools-k8s.sh $(filter-out $(KUBE_VERSION),$(COMPAT_VERSIONS))

.PHONY: e2e-compat
e2e-compat: tools tools-compat build ## The e2e smoke (aggregator, kubectl top, an HPA, the LWS group HPA) on each release in COMPAT_VERSIONS, logs in bin/e2e-compat-<version>.log; not part of make test.
	@set -e; for v in $(COMPAT_VERSIONS); do \
		if [ "$$v" = "$(KUBE_VERSION)" ]; then export GMS_K8S_VERSION=; else export GMS_K8S_VERSION=$$v; fi; \
		log=$(BIN_DIR)/e2e-compat-$$v.log; echo "e2e-compat: Kubernetes $$v (log $$log)"; rc=0; \
		$(GO) test -tags e2e -count=1 -timeout 20m -v -run '$(COMPAT_TESTS)' ./test/e2e/ >$$log 2>&1 || rc=$$?; \
		grep -E '^(--- |PASS|FAIL|ok )|^e2e setup:|compat_test.go:' $$log | cut -c1-240 || true; \
		if [ $$rc -ne 0 ]; then echo "e2e-compat: Kubernetes $$v failed, see $$log"; exit 1; fi; \
	done

.PHONY: bench
bench: ## In-process benchmarks (decode, store write, list), recorded in docs/bench/.
	mkdir -p docs/bench
	$(GO) test -run='^$$' -bench=. -benchmem -count=$(BENCH_COUNT) ./pkg/... | tee docs/bench/$$(date +%F).txt

.PHONY: bench-compare
bench-compare: tools build ## Side by side with metrics-server on a local cluster (BENCH_NODES, BENCH_PODS, BENCH_ROUNDS), to docs/bench/compare-<date>.txt.
	mkdir -p docs/bench
	set -o pipefail; $(GO) run ./test/benchcompare $(BENCH_COMPARE_FLAGS) 2>&1 | tee $${BENCH_COMPARE_OUT:-docs/bench/compare-$$(date +%F).txt}

.PHONY: verify
verify: verify-fmt verify-vet verify-lint verify-tidy verify-openapi verify-flags-doc verify-vuln ## All static checks.

.PHONY: verify-fmt
verify-fmt: ## gofmt and goimports.
	@out="$$(gofmt -l $$(git ls-files '*.go'))"; if [ -n "$$out" ]; then echo "gofmt needed (make update-fmt):"; echo "$$out"; exit 1; fi
	@out="$$($(TOOLS) goimports -local github.com/group-metrics-server/group-metrics-server -l $$(git ls-files '*.go' | grep -v '^pkg/generated/'))"; if [ -n "$$out" ]; then echo "goimports needed (make update-fmt):"; echo "$$out"; exit 1; fi

.PHONY: update-fmt
update-fmt: ## Apply gofmt and goimports.
	gofmt -w $$(git ls-files '*.go')
	$(TOOLS) goimports -local github.com/group-metrics-server/group-metrics-server -w $$(git ls-files '*.go' | grep -v '^pkg/generated/')

.PHONY: verify-vet
verify-vet: ## go vet of the modules golangci-lint does not read (make verify-lint runs vet's analyzers on the main module, e2e and chart files too).
	cd test/hpacalc && GOWORK=off $(GO) vet ./...
	cd test/monitoring && GOWORK=off $(GO) vet ./...
	cd hack/image && GOWORK=off $(GO) vet ./...

.PHONY: verify-lint
verify-lint: ## golangci-lint (v2 config in .golangci.yaml).
	$(TOOLS) golangci-lint run ./...

.PHONY: verify-tidy
verify-tidy: ## go.mod and go.sum are tidy, in every module.
	bash hack/verify-tidy.sh

.PHONY: verify-vuln
verify-vuln: ## govulncheck against a pinned, locally built vulnerability database (docs/security.md).
	bash hack/verify-vuln.sh

.PHONY: verify-openapi
verify-openapi: ## The generated OpenAPI definitions are current.
	bash hack/verify-openapi.sh

.PHONY: update-openapi
update-openapi: ## Regenerate the OpenAPI definitions.
	bash hack/update-openapi.sh

.PHONY: update-flags-doc
update-flags-doc: ## Regenerate docs/flags.md from --help.
	bash hack/update-flags-doc.sh

.PHONY: verify-flags-doc
verify-flags-doc: ## docs/flags.md matches --help.
	@cp docs/flags.md /tmp/gms-flags.md.$$$$ && bash hack/update-flags-doc.sh && \
	 if ! diff -u /tmp/gms-flags.md.$$$$ docs/flags.md; then cp /tmp/gms-flags.md.$$$$ docs/flags.md; echo "docs/flags.md is stale: run 'make update-flags-doc'"; exit 1; fi; \
	 rm -f /tmp/gms-flags.md.$$$$

.PHONY: update
update: update-fmt update-openapi update-flags-doc ## Every update-x.

.PHONY: demo
demo: tools build ## Run the server on an embedded local cluster until interrupted.
	$(GO) run ./test/demo

.PHONY: demo-down
demo-down: ## Stop a demo left running and remove its files.
	$(GO) run ./test/demo --down

.PHONY: clean
clean: ## Remove built binaries (keeps the control-plane binaries cache).
	rm -f $(BIN_DIR)/group-metrics-server
