# phalanks-operator. `make help` lists the targets.

VERSION ?= 0.2.0
IMAGE_REGISTRY ?= quay.io/phalanks
IMG ?= $(IMAGE_REGISTRY)/phalanks-operator:v$(VERSION)
BUNDLE_IMG ?= $(IMAGE_REGISTRY)/phalanks-operator-bundle:v$(VERSION)
CATALOG_IMG ?= $(IMAGE_REGISTRY)/phalanks-operator-catalog:latest
CONTAINER_TOOL ?= docker

SHELL = /usr/bin/env bash -o pipefail
.SHELLFLAGS = -ec

BIN := $(CURDIR)/bin
export PATH := $(BIN):$(PATH)
CONTROLLER_GEN := $(BIN)/controller-gen
KUSTOMIZE := $(BIN)/kustomize
GOLANGCI_LINT := $(BIN)/golangci-lint
KUBECTL := $(BIN)/kubectl

# Test packages run in parallel; every harness picks its own ports and directories.
GO_TEST_FLAGS ?= -race -count=1 -timeout=40m

.PHONY: all
all: build

##@ General

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*##"; printf "Usage:\n  make \033[36m<target>\033[0m\n"} /^[a-zA-Z_0-9-]+:.*?##/ { printf "  \033[36m%-16s\033[0m %s\n", $$1, $$2 } /^##@/ { printf "\n\033[1m%s\033[0m\n", substr($$0, 5) } ' $(MAKEFILE_LIST)

.PHONY: demo
demo: build tools-runtime ## Run the operator on a local control plane with MinIO and the samples (DEMO_ONESHOT=1 exits when they are ready).
	go run ./hack/demo

##@ Development

.PHONY: manifests
manifests: tools-gen ## Generate CRDs and RBAC from the API types and markers.
	$(CONTROLLER_GEN) rbac:roleName=manager-role crd paths="./..." output:crd:artifacts:config=config/crd/bases

.PHONY: generate
generate: tools-gen ## Generate DeepCopy methods.
	$(CONTROLLER_GEN) object:headerFile="hack/boilerplate.go.txt" paths="./api/..."

.PHONY: fmt
fmt: ## Run go fmt.
	go fmt ./...

.PHONY: vet
vet: ## Run go vet.
	go vet ./...

.PHONY: lint
lint: tools-lint ## Run golangci-lint.
	$(GOLANGCI_LINT) run ./...

.PHONY: lint-fix
lint-fix: tools-lint ## Run golangci-lint and apply its fixes.
	$(GOLANGCI_LINT) run --fix ./...

.PHONY: verify
verify: manifests generate ## Regenerate everything and fail if the tree changed.
	go mod tidy
	@if [ -n "$$(git status --porcelain -- . ':!bin')" ]; then \
		echo "verify: generated files are stale; run the generators and commit:"; \
		git status --porcelain -- . ':!bin'; git --no-pager diff --stat; exit 1; \
	fi

.PHONY: test
test: verify vet lint tools-runtime ## Run verify, vet, lint, then unit, envtest and MinIO suites with the race detector.
	go test $(GO_TEST_FLAGS) ./...

.PHONY: test-e2e
test-e2e: build tools-runtime ## Run the demo once to its expected states, and the local-cluster e2e suite.
	DEMO_ONESHOT=1 go run ./hack/demo

# Scenario benchmarks run one at a time (-p 1): each measures a peer in the same run
# and reports ratios, and two at once would share the two cores.
BENCH ?= .
.PHONY: bench
bench: build tools-runtime tools-peers ## Run the scenario benchmarks under test/bench (BENCH=regexp selects).
	go test -p 1 -count=1 -run '^$$' -bench '$(BENCH)' -benchtime=1x -timeout=80m ./test/bench/...

##@ Build

.PHONY: build
build: ## Build the manager binary.
	go build -o $(BIN)/manager .

.PHONY: run
run: manifests generate ## Run the manager against the current kubeconfig.
	go run . --metrics-bind-address=0 --health-probe-bind-address=:8081

.PHONY: docker-build
docker-build: ## Build the manager image (needs a container runtime).
	$(CONTAINER_TOOL) build -t $(IMG) .

.PHONY: docker-push
docker-push: ## Push the manager image.
	$(CONTAINER_TOOL) push $(IMG)

##@ Deployment

.PHONY: install
install: manifests tools-gen ## Install the CRDs into the cluster of the current kubeconfig.
	$(KUSTOMIZE) build config/crd | $(KUBECTL) apply --server-side -f -

.PHONY: uninstall
uninstall: manifests tools-gen ## Remove the CRDs (and every custom resource) from the cluster.
	$(KUSTOMIZE) build config/crd | $(KUBECTL) delete --ignore-not-found -f -

.PHONY: deploy
deploy: manifests tools-gen ## Deploy the operator with kustomize (needs cert-manager for the conversion webhook).
	cd config/manager && $(KUSTOMIZE) edit set image controller=$(IMG)
	$(KUSTOMIZE) build config/default | $(KUBECTL) apply --server-side -f -

.PHONY: undeploy
undeploy: tools-gen ## Remove the kustomize deployment.
	$(KUSTOMIZE) build config/default | $(KUBECTL) delete --ignore-not-found -f -

##@ Tools

.PHONY: tools
tools: ## Build every pinned tool into the per-machine cache (hack/tools/build.sh).
	hack/tools/build.sh

.PHONY: tools-gen tools-lint tools-runtime tools-peers
tools-gen:
	@hack/tools/build.sh gen
tools-lint:
	@hack/tools/build.sh lint
tools-runtime:
	@hack/tools/build.sh kube kwok minio
tools-peers:
	@hack/tools/build.sh peers
