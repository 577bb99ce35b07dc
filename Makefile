# group-metrics-server. `make help` lists the targets.
SHELL := /usr/bin/env bash
GO ?= go
BIN_DIR ?= $(CURDIR)/bin
TOOLS := $(GO) tool -modfile=hack/tools/go.mod
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X github.com/group-metrics-server/group-metrics-server/cmd/group-metrics-server/app.Version=$(VERSION)
E2E_TIMEOUT ?= 45m
FUZZTIME ?= 10s
BENCH_COUNT ?= 6

export GMS_BIN_DIR := $(BIN_DIR)

# Every target builds with the Go that go.mod's toolchain line names (a
# patch release whose standard library has the security fixes; make
# verify-vuln holds the build to it), fetched by the go command through the
# module proxy on first use. GOTOOLCHAIN=local make ... keeps the installed Go.
export GOTOOLCHAIN ?= $(shell sed -n 's/^toolchain //p' go.mod)

.PHONY: help
help: ## Show the targets.
	@grep -hE '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | sed -E 's/:.*## /\t/' | expand -t 20

.PHONY: build
build: ## Build bin/group-metrics-server.
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN_DIR)/group-metrics-server ./cmd/group-metrics-server

.PHONY: tools
tools: ## Build the control-plane binaries (etcd, kube-*, kubectl, kwok, metrics-server) and helm into bin/, once.
	bash hack/tools.sh

.PHONY: test
test: test-unit fuzz-short test-chart e2e ## Everything CI runs: unit and in-process tests, short fuzzing, the Helm chart, the e2e suite.

.PHONY: test-unit
test-unit: ## Unit and in-process tests, with the race detector; then the HPA's own calculator on group values (test/hpacalc).
	$(GO) test -race -count=1 ./...
	cd test/hpacalc && GOWORK=off $(GO) test -count=1 -v ./...

.PHONY: test-chart
test-chart: tools ## helm lint and template of the chart for every example values file, its schema, and the chart against manifests/.
	$(GO) test -tags chart -count=1 -v ./test/chart/

.PHONY: fuzz-short
fuzz-short: ## Run every fuzz target for FUZZTIME (default 10s).
	FUZZTIME=$(FUZZTIME) bash hack/fuzz.sh

.PHONY: fuzz
fuzz: ## Longer fuzzing: every target for 5 minutes.
	FUZZTIME=5m bash hack/fuzz.sh

.PHONY: e2e
e2e: tools build ## The e2e suite on a real local control plane.
	$(GO) test -tags e2e -count=1 -timeout $(E2E_TIMEOUT) ./test/...

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
verify-vet: ## go vet, with the e2e files too.
	$(GO) vet ./...
	$(GO) vet -tags e2e ./test/...
	$(GO) vet -tags chart ./test/chart/...
	cd test/hpacalc && GOWORK=off $(GO) vet ./...

.PHONY: verify-lint
verify-lint: ## golangci-lint (v2 config in .golangci.yaml).
	$(TOOLS) golangci-lint run ./...

.PHONY: verify-tidy
verify-tidy: ## go.mod and go.sum are tidy, in every module.
	@for m in . hack/tools hack/helm test/tools test/tools/metrics-server test/tools/lws test/hpacalc; do \
		(cd $$m && cp go.mod /tmp/gms-go.mod.$$$$ && cp go.sum /tmp/gms-go.sum.$$$$ && GOWORK=off $(GO) mod tidy && \
		 if ! diff -q go.mod /tmp/gms-go.mod.$$$$ >/dev/null || ! diff -q go.sum /tmp/gms-go.sum.$$$$ >/dev/null; then \
		   cp /tmp/gms-go.mod.$$$$ go.mod; cp /tmp/gms-go.sum.$$$$ go.sum; echo "$$m: go mod tidy changes go.mod/go.sum"; exit 1; fi; \
		 rm -f /tmp/gms-go.mod.$$$$ /tmp/gms-go.sum.$$$$) || exit 1; \
	done

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
