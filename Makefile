# phalanks-operator. `make help` lists the targets.

VERSION ?= 0.2.0
IMAGE_REGISTRY ?= quay.io/phalanks
IMG ?= $(IMAGE_REGISTRY)/phalanks-operator:v$(VERSION)
BUNDLE_IMG ?= $(IMAGE_REGISTRY)/phalanks-operator-bundle:v$(VERSION)
CATALOG_IMG ?= $(IMAGE_REGISTRY)/phalanks-operator-catalog:latest
SCORECARD_TEST_IMG ?= $(IMAGE_REGISTRY)/phalanks-operator-scorecard-tests:v$(VERSION)
# The commit the images are built from (org.opencontainers.image.revision).
REVISION ?= $(shell git rev-parse HEAD 2>/dev/null)
# Images are built without a container runtime (hack/olm/images) into this OCI image
# layout; the *-push targets push from it. IMAGES_PUSH=true makes `make images` push
# straight to IMG, BUNDLE_IMG, CATALOG_IMG and SCORECARD_TEST_IMG instead.
IMAGE_LAYOUT ?= $(BIN)/images
IMAGES_PUSH ?= false
# Plain HTTP to registries that have no TLS (loopback and private addresses always get it).
REGISTRY_PLAIN_HTTP ?= false
# Pin every image the bundle's manifests name (the CSV's; the scorecard configuration
# keeps its tags) by the digest its registry holds (operator-sdk generate bundle
# --use-image-digests); the images must have been pushed (make docker-push).
USE_IMAGE_DIGESTS ?= false

# The bundle's channels, as operator-sdk's go/v4 Makefile names them.
CHANNELS ?= stable
DEFAULT_CHANNEL ?= stable
BUNDLE_METADATA_OPTS ?= --channels=$(CHANNELS) --default-channel=$(DEFAULT_CHANNEL)
BUNDLE_GEN_FLAGS ?= -q --overwrite --version $(VERSION) $(BUNDLE_METADATA_OPTS)
ifeq ($(USE_IMAGE_DIGESTS), true)
	BUNDLE_GEN_FLAGS += --use-image-digests
endif

SHELL = /usr/bin/env bash -o pipefail
.SHELLFLAGS = -ec

# The modules of what users run (the manager and the kubectl plugin, the scorecard tests',
# catalog's opm and health probe images) name in their go.mod the Go release they are
# built with (a toolchain line: the standard library's security fixes, which govulncheck
# checks for); auto lets the go command fetch it from the module proxy. Modules without
# such a line (the test tools') build with the Go on PATH.
export GOTOOLCHAIN := auto
# Every go command builds with -trimpath: what it compiles records module paths, not this
# checkout's directory, so Go's build cache serves every clone on the machine (without it
# a fresh clone, as CI's, compiles the whole module again: each package's cache key holds
# its directory). Stack traces name files by module path.
export GOFLAGS := $(strip -trimpath $(filter-out -trimpath,$(GOFLAGS)))

BIN := $(CURDIR)/bin
export PATH := $(BIN):$(PATH)
CONTROLLER_GEN := $(BIN)/controller-gen
KUSTOMIZE := $(BIN)/kustomize
GOLANGCI_LINT := $(BIN)/golangci-lint
KUBECTL := $(BIN)/kubectl
OPERATOR_SDK := $(BIN)/operator-sdk

# Test packages run in parallel; every harness picks its own ports and directories.
GO_TEST_FLAGS ?= -race -count=1 -timeout=40m
# How many test binaries make test runs at once (go test's -p; its default is the number
# of CPUs). The real-cluster suites wait on their clusters most of their time, so three
# at once on two cores fill the time one of them leaves idle (docs/development.md, "Where
# CI's time goes").
GO_TEST_PARALLEL ?= 3
# The OLM module's tests run without the race detector: they drive operator-sdk, opm,
# kustomize and the image builds in-process, whose compression, digests and YAML the
# detector slows about tenfold (hack/olm took 25 minutes with it, 3 without), and the
# module starts no goroutine of its own; the operator's concurrent code is raced above.
OLM_TEST_FLAGS ?= -count=1 -timeout=40m

# The Kubernetes versions the suites run on (docs/kubernetes-versions.md). The default
# tool sets (kube, kubectl, node) are the newest supported version; every other kept
# version is a tool set kube-<minor> (hack/tools/kube-<minor>) holding its control plane,
# which a suite runs when PHALANKS_KUBE_TOOLS names it. The oldest is the CSV's
# minKubeVersion.
KUBE_OLDEST := kube-1.29
KUBE_VERSIONS := kube $(KUBE_OLDEST)
# The suites that start an API server without a real node (envtest and the local cluster
# with fake nodes): test-k8s-versions runs every one of them on every kept version.
KUBE_SUITES = $(filter-out %/realnode,$(shell go list ./controllers/... ./internal/... ./test/e2e/... ./test/harness/envtest ./test/harness/cluster))
# The ones that exercise what differs between API server versions, which make test also
# runs on the oldest: CRD schemas and CEL rules at admission (storagebucket), the
# conversion webhook (webhooks), KEP-5866 shard selectors and the Lease ring (sharding),
# server-side apply of workloads, HPAs and PDBs (scaling), rewriting stored objects and
# storedVersions (storagemigration). The others use the same APIs the same way on every
# version; test-k8s-versions runs them on the oldest too.
KUBE_OLDEST_SUITES := ./controllers/storagebucket ./controllers/scaling ./internal/webhooks ./internal/sharding \
	./internal/storagemigration

# The OLM tooling (bundle and catalog generator, validation, scorecard checks) is a Go
# module of its own, so operator-registry's dependency tree stays out of the operator's
# go.mod. containers/image, which operator-registry pulls in, builds without the gpgme C
# library only with this tag.
OLM_MODULE := hack/olm
OLM_GO_TAGS := containers_image_openpgp
OLM := go -C $(OLM_MODULE) run -tags $(OLM_GO_TAGS) ./cmd/olm
# The bundle directory the bundle image is built from: bundle/, or a released bundle under
# hack/olm/releases/<version>/ (docs/olm.md, release checklist).
BUNDLE_DIR ?= bundle
IMAGES_FLAGS = --layout $(IMAGE_LAYOUT) --bundle-dir $(BUNDLE_DIR) --plain-http=$(REGISTRY_PLAIN_HTTP) --version $(VERSION) --revision "$(REVISION)" \
	--image $(IMG) --bundle-image $(BUNDLE_IMG) --catalog-image $(CATALOG_IMG) --scorecard-image $(SCORECARD_TEST_IMG)
# The OLM end-to-end test (make test-olm) is a third module: it runs hack/olm's generator.
OLM_E2E_MODULE := test/olm
# The OLM v1 end-to-end test (make test-olmv1) is a fourth, using test/olm's packaging.
OLMV1_E2E_MODULE := test/olmv1
# The upgrade-invariance suite (make test-upgrade) is a fifth, using test/olm's packaging.
UPGRADE_E2E_MODULE := test/upgrade
# Code written here for the olmv1 tool set: the cert-manager command and the boxcutter
# stand-in module (hack/tools/olmv1/boxcutter).
OLMV1_TOOLS := hack/tools/olmv1
BOXCUTTER_MODULE := hack/tools/olmv1/boxcutter

.PHONY: all
all: build

##@ General

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*##"; printf "Usage:\n  make \033[36m<target>\033[0m\n"} /^[a-zA-Z_0-9-]+:.*?##/ { printf "  \033[36m%-16s\033[0m %s\n", $$1, $$2 } /^##@/ { printf "\n\033[1m%s\033[0m\n", substr($$0, 5) } ' $(MAKEFILE_LIST)

.PHONY: demo
demo: tools-for-demo manager ## Run the operator on a local cluster with a real node (needs root), MinIO and the samples, their pods running (DEMO_ONESHOT=1 exits when they are ready).
	go run ./hack/demo

##@ Development

# The module's package pattern rather than ./...: on a path, controller-gen also descends
# into nested modules (hack/olm), which are not the operator's.
.PHONY: manifests
manifests: tools-for-manifests ## Generate CRDs and RBAC from the API types and markers.
	$(CONTROLLER_GEN) rbac:roleName=manager-role crd paths="github.com/phalanks/phalanks-operator/..." output:crd:artifacts:config=config/crd/bases

.PHONY: generate
generate: tools-for-generate ## Generate DeepCopy methods.
	$(CONTROLLER_GEN) object:headerFile="hack/boilerplate.go.txt" paths="./api/..."

.PHONY: fmt
fmt: ## Run go fmt.
	go fmt ./...
	go -C $(OLM_MODULE) fmt ./...
	go -C $(OLM_E2E_MODULE) fmt ./...
	go -C $(OLMV1_E2E_MODULE) fmt ./...
	go -C $(UPGRADE_E2E_MODULE) fmt ./...
	go -C $(OLMV1_TOOLS) fmt ./certmanager
	go -C $(BOXCUTTER_MODULE) fmt ./...

.PHONY: vet
vet: ## Run go vet.
	go vet ./...
	go -C $(OLM_MODULE) vet -tags $(OLM_GO_TAGS) ./...
	go -C $(OLM_E2E_MODULE) vet -tags $(OLM_GO_TAGS) ./...
	go -C $(OLMV1_E2E_MODULE) vet -tags $(OLM_GO_TAGS) ./...
	go -C $(UPGRADE_E2E_MODULE) vet -tags $(OLM_GO_TAGS) ./...
	go -C $(OLMV1_TOOLS) vet ./certmanager
	go -C $(BOXCUTTER_MODULE) vet ./...

.PHONY: lint
lint: tools-for-lint ## Run golangci-lint.
	$(GOLANGCI_LINT) run ./...
	cd $(OLM_MODULE) && $(GOLANGCI_LINT) run --build-tags $(OLM_GO_TAGS) ./...
	cd $(OLM_E2E_MODULE) && $(GOLANGCI_LINT) run --build-tags $(OLM_GO_TAGS) ./...
	cd $(OLMV1_E2E_MODULE) && $(GOLANGCI_LINT) run --build-tags $(OLM_GO_TAGS) ./...
	cd $(UPGRADE_E2E_MODULE) && $(GOLANGCI_LINT) run --build-tags $(OLM_GO_TAGS) ./...
	cd $(OLMV1_TOOLS) && $(GOLANGCI_LINT) run ./certmanager
	cd $(BOXCUTTER_MODULE) && $(GOLANGCI_LINT) run ./...

.PHONY: lint-fix
lint-fix: tools-for-lint ## Run golangci-lint and apply its fixes.
	$(GOLANGCI_LINT) run --fix ./...
	cd $(OLM_MODULE) && $(GOLANGCI_LINT) run --build-tags $(OLM_GO_TAGS) --fix ./...
	cd $(OLM_E2E_MODULE) && $(GOLANGCI_LINT) run --build-tags $(OLM_GO_TAGS) --fix ./...
	cd $(OLMV1_E2E_MODULE) && $(GOLANGCI_LINT) run --build-tags $(OLM_GO_TAGS) --fix ./...
	cd $(UPGRADE_E2E_MODULE) && $(GOLANGCI_LINT) run --build-tags $(OLM_GO_TAGS) --fix ./...
	cd $(OLMV1_TOOLS) && $(GOLANGCI_LINT) run --fix ./certmanager
	cd $(BOXCUTTER_MODULE) && $(GOLANGCI_LINT) run --fix ./...

# What users run: the manager and the kubectl plugin. govulncheck reads the database the
# vuln tool set builds from a pinned golang.org/x/vulndb (hack/tools/vuln), so the check
# is offline and gives the same answer until the pin moves (docs/development.md).
# VULNCHECK_DIR and VULNCHECK_PACKAGES choose another module and its packages.
VULNCHECK_DIR ?= .
VULNCHECK_PACKAGES ?= . ./cmd/kubectl-phalanks
.PHONY: vulncheck
vulncheck: tools-for-vulncheck ## Fail on a known vulnerability that the manager or the kubectl plugin calls (govulncheck, offline).
	$(BIN)/govulncheck -db file://$(BIN)/vulndb -C $(VULNCHECK_DIR) $(VULNCHECK_PACKAGES)

# make linkcheck fails when a relative link or an anchor of a Markdown file does not
# resolve (remark with remark-validate-links, hack/tools/remark, installed with npm by
# hack/tools/npm.sh). LINKCHECK_ROOT and LINKCHECK_FILES check other files (paths
# relative to the root; a directory means its Markdown files).
LINKCHECK_ROOT ?= .
LINKCHECK_FILES ?= $(shell git ls-files '*.md' ':!:**/testdata/**')
.PHONY: linkcheck
linkcheck: ## Fail on a relative link or anchor of the docs that does not resolve (remark-validate-links).
	@dir=$$(hack/tools/npm.sh remark) && cd $(LINKCHECK_ROOT) && \
		node $$dir/node_modules/remark-cli/cli.js --no-config --no-stdout --quiet --frail --no-color \
		--use "$$dir/node_modules/remark-validate-links/index.js=repository:'phalanks/phalanks-operator',root:'.'" $(LINKCHECK_FILES)

.PHONY: verify
verify: tools-for-verify manifests generate catalog ## Regenerate everything (CRDs, RBAC, deepcopy, bundle, catalog) and fail if the tree changed.
	go mod tidy
	go -C $(OLM_MODULE) mod tidy
	go -C $(OLM_E2E_MODULE) mod tidy
	go -C $(OLMV1_E2E_MODULE) mod tidy
	go -C $(UPGRADE_E2E_MODULE) mod tidy
	go -C $(BOXCUTTER_MODULE) mod tidy
	@if [ -n "$$(git status --porcelain -- . ':!bin')" ]; then \
		echo "verify: generated files are stale; run the generators and commit:"; \
		git status --porcelain -- . ':!bin'; git --no-pager diff --stat; exit 1; \
	fi

.PHONY: test test-suites test-checks
# The suites spend most of their time waiting on their clusters, so the static checks
# (vet, lint, vulncheck, the bundle's validators, the OperatorHub checks) run beside them
# at the lowest CPU and I/O priority, and make test fails if either side failed.
# TEST_JOBS=1 runs the suites first and the checks after them.
TEST_JOBS ?= 2
test: tools-for-test verify docker-build ## Run verify, then the unit, envtest, MinIO, local-cluster, real-node e2e and OLM bundle suites with the race detector (needs root; the API-server suites also on the oldest supported Kubernetes) beside vet, lint, vulncheck, operator-sdk bundle validate and the OperatorHub checks.
	$(MAKE) --no-print-directory -j$(TEST_JOBS) test-suites test-checks

# go test starts packages in the order they are named: the longest suites first, so
# that the short ones fill the slots beside them instead of the long ones starting last
# and running alone at the end (docs/development.md, "Where CI's time goes").
GO_TEST_FIRST ?= ./test/e2e/storagebucket ./test/e2e/realnode ./test/e2e/scaling ./internal/sharding
# Packages make test leaves to a target of their own: test/dockerfiles (make test-images)
# builds images with buildah, CPU that make test's suites have no room for and the OLM
# suites, which mostly wait, leave free (CI runs the three side by side).
GO_TEST_OWN_TARGET := github.com/phalanks/phalanks-operator/test/dockerfiles
# Expanded only where a recipe uses it.
GO_TEST_PACKAGES = $(filter-out $(GO_TEST_OWN_TARGET),$(shell go list ./...))

# The real-node suites (test/e2e/realnode, test/harness/cluster/realnode) need root; the
# first runs the operator image docker-build writes into IMAGE_LAYOUT. After the
# operator's packages, the suites on the oldest Kubernetes (which wait on their API
# servers: 1.2 cores busy alone) and the OLM module's tests (1.5 cores) run side by side
# (-j$(TEST_JOBS)) instead of one after the other.
test-suites:
	@# The real-node suite installs the Prometheus Operator from its module's bundle.yaml,
	@# inside a sandbox without network.
	go -C hack/tools/prometheus-operator mod download github.com/prometheus-operator/prometheus-operator
	IMAGE_LAYOUT=$(IMAGE_LAYOUT) go test $(GO_TEST_FLAGS) -p $(GO_TEST_PARALLEL) $(GO_TEST_FIRST) $(GO_TEST_PACKAGES)
	$(MAKE) --no-print-directory -j$(TEST_JOBS) test-suites-oldest test-suites-olm test-suites-versitygw

.PHONY: test-suites-oldest test-suites-olm test-suites-versitygw
test-suites-oldest:
	PHALANKS_KUBE_TOOLS=$(KUBE_OLDEST) go test $(GO_TEST_FLAGS) -p $(GO_TEST_PARALLEL) $(KUBE_OLDEST_SUITES)
# The StorageBucket controller's suite once more against versitygw, the second S3
# implementation (docs/storagebucket.md, "S3 implementations"); the specs of what only
# MinIO offers carry the label minio-only.
test-suites-versitygw:
	PHALANKS_TEST_S3=versitygw go test $(GO_TEST_FLAGS) ./controllers/storagebucket -ginkgo.label-filter='!minio-only'
test-suites-olm:
	go -C $(OLM_MODULE) test -tags $(OLM_GO_TAGS) $(OLM_TEST_FLAGS) ./...

test-checks:
	nice -n 19 ionice -c 3 $(MAKE) --no-print-directory vet lint vulncheck linkcheck bundle-validate operatorhub

# The StorageBucket chaos suite (test/e2e/storagebucket/chaos_test.go): make test runs
# it for 75 s of faults, this target for CHAOS_DURATION; CHAOS_SEED replays a schedule.
CHAOS_DURATION ?= 10m
CHAOS_SEED ?=
.PHONY: chaos
chaos: tools-for-chaos ## Run the StorageBucket chaos suite for CHAOS_DURATION (10m): three managers, stalled API connections, Lease writes answered 429, pauses (SIGSTOP), skewed clocks, kills, ended watches, StorageBuckets deleted and re-created.
	PHALANKS_CHAOS_DURATION=$(CHAOS_DURATION) PHALANKS_CHAOS_SEED=$(CHAOS_SEED) \
		go test $(GO_TEST_FLAGS) -v ./test/e2e/storagebucket/ -ginkgo.label-filter=chaos -ginkgo.v
# One version after the other: each run uses both cores.
.PHONY: test-k8s-versions
test-k8s-versions: tools-for-test-k8s-versions ## Run every envtest and local-cluster suite on every supported Kubernetes version (KUBE_VERSIONS).
	$(foreach set,$(KUBE_VERSIONS),PHALANKS_KUBE_TOOLS=$(set) go test $(GO_TEST_FLAGS) $(KUBE_SUITES) && ) true

.PHONY: test-e2e
test-e2e: tools-for-test-e2e manager ## Run the demo once: every sample must reach its expected state.
	DEMO_ONESHOT=1 go run ./hack/demo

# The Dockerfiles users build (Dockerfile, bundle.Dockerfile, catalog.Dockerfile, the
# scorecard tests'), built with a real builder, Debian's buildah, for linux/amd64 and
# linux/arm64, checked against what users get and compared file by file with the
# daemonless build's images (as root; docs/olm.md, "The Dockerfiles").
.PHONY: test-images
test-images: tools-for-test-images ## Build the Dockerfiles with buildah (amd64 and arm64) and check the images against the daemonless build's (needs root).
	@# The builder stages' go mod download reads the machine's module cache (no network
	@# in the build): every module of the modules the Dockerfiles build, fetched here.
	go mod download
	go -C hack/olm mod download
	go -C hack/tools/opm mod download
	go -C hack/tools/healthprobe mod download
	go test $(GO_TEST_FLAGS) $(GO_TEST_OWN_TARGET)

# The OLM end-to-end test needs root: it runs the local cluster with a real node and OLM
# (olm, catalog and package-server out of cluster) in a sandbox of private namespaces;
# OLM runs the catalog image, the bundle unpack Jobs, the operator image and the
# scorecard tests as pods. The test binary is built here, with the module proxy at hand,
# and enters the sandbox itself; it builds the images for the node's platform.
OLM_E2E_FLAGS ?=
.PHONY: test-olm
test-olm: tools-for-test-olm ## Install, upgrade and uninstall the operator through the real OLM on a real node, with its scorecard tests as pods (needs root).
	go -C $(OLM_E2E_MODULE) test -c -tags $(OLM_GO_TAGS) -o $(BIN)/olm-e2e.test .
	@# The suite compiles the images' binaries inside the sandbox, which has no network:
	@# their modules and the Go release their go.mod names are fetched here.
	go mod download
	go -C hack/tools/opm mod download
	go -C hack/tools/healthprobe mod download
	go -C hack/tools/olm mod download
	$(BIN)/olm-e2e.test -test.v -test.timeout=40m -ginkgo.v $(OLM_E2E_FLAGS)

# The OLM v1 end-to-end test needs root, like test-olm: the local cluster with a real node
# (and cluster DNS) in a sandbox; cert-manager's controllers out of cluster; catalogd and
# operator-controller as upstream's standard manifest deploys them, from images of the
# olmv1 tool set's binaries; the operator from our catalog and bundle images. The boxcutter
# stand-in's tests run first (they need no root; its tracking cache's run against a real
# kube-apiserver, envtest with the kube tool set's binaries).
OLMV1_E2E_FLAGS ?=
.PHONY: test-olmv1
test-olmv1: tools-for-test-olmv1 ## Install, upgrade and uninstall the operator through OLM v1 (catalogd, operator-controller) on a real node (needs root).
	KUBEBUILDER_ASSETS=$(BIN) go -C $(BOXCUTTER_MODULE) test -count=1 ./...
	go -C $(OLMV1_E2E_MODULE) test -c -tags $(OLM_GO_TAGS) -o $(BIN)/olmv1-e2e.test .
	@# The suite compiles the images' binaries inside the sandbox, which has no network:
	@# their modules and the Go release their go.mod names are fetched here.
	go mod download
	go -C hack/tools/opm mod download
	go -C hack/tools/healthprobe mod download
	$(BIN)/olmv1-e2e.test -test.v -test.timeout=40m -ginkgo.v $(OLMV1_E2E_FLAGS)

# The upgrade-invariance suite needs root, like test-olm: one local cluster with a real
# node, the tree packaged as the previous release and the next one (test/olm's
# packaging), a fleet of StorageBuckets, Foos and scheduled workloads in their downtime,
# upgraded (and rolled back) through each install path while it is sampled every second
# (docs/upgrading.md). It prints, per path, the rollout time, the longest probe gap and
# every Ready transition.
UPGRADE_E2E_FLAGS ?=
.PHONY: test-upgrade
test-upgrade: tools-for-test-upgrade ## Upgrade and roll back a fleet through each install path on a real node, sampled every second: nothing flaps, nothing is lost (needs root).
	go -C $(UPGRADE_E2E_MODULE) test -c -tags $(OLM_GO_TAGS) -o $(BIN)/upgrade-e2e.test .
	$(BIN)/upgrade-e2e.test -test.v -test.timeout=40m -ginkgo.v $(UPGRADE_E2E_FLAGS)

# Scenario benchmarks run one at a time (-p 1): each measures a peer in the same run
# and reports ratios, and two at once would share the two cores.
BENCH ?= .
.PHONY: bench
bench: tools-for-bench build ## Run the scenario benchmarks under test/bench (BENCH=regexp selects).
	go test -p 1 -count=1 -run '^$$' -bench '$(BENCH)' -benchtime=1x -timeout=80m ./test/bench/...

##@ Build

.PHONY: build
build: manager ## Build the manager binary and the kubectl plugin bin/kubectl-phalanks.
	go build -o $(BIN)/kubectl-phalanks ./cmd/kubectl-phalanks

# The manager binary alone, for the targets that run it.
.PHONY: manager
manager:
	go build -o $(BIN)/manager .

# Where install-plugin puts kubectl-phalanks: a directory on PATH, where kubectl finds
# plugins.
PLUGIN_DIR ?= /usr/local/bin
.PHONY: install-plugin
install-plugin: build ## Install kubectl-phalanks into PLUGIN_DIR (default /usr/local/bin), so that `kubectl phalanks` runs it.
	install -m 0755 $(BIN)/kubectl-phalanks $(PLUGIN_DIR)/kubectl-phalanks

.PHONY: plugin-dist
plugin-dist: tools-for-plugin-dist ## Build kubectl-phalanks release archives for every platform and their krew manifest into bin/plugin-dist, checked by krew's validator.
	go run ./hack/krew -version v$(VERSION) -out $(BIN)/plugin-dist
	$(BIN)/validate-krew-manifest -manifest $(BIN)/plugin-dist/phalanks.yaml -skip-install

.PHONY: run
run: tools-for-run manifests generate ## Run the manager against the current kubeconfig (webhook on a self-signed certificate).
	go run ./hack/devcerts -dir $(BIN)/dev-certs
	go run . --metrics-bind-address=0 --health-probe-bind-address=:8081 --webhook-cert-dir=$(BIN)/dev-certs

.PHONY: docker-build
docker-build: tools-for-docker-build ## Build the manager image IMG (linux/amd64 and arm64, no container runtime) into IMAGE_LAYOUT.
	$(OLM) images build --only operator $(IMAGES_FLAGS)

.PHONY: docker-push
docker-push: tools-for-docker-push ## Push the manager image IMG from IMAGE_LAYOUT.
	$(OLM) images push --only operator $(IMAGES_FLAGS)

.PHONY: images
images: tools-for-images ## Build the operator, scorecard-test, bundle and catalog images into IMAGE_LAYOUT (IMAGES_PUSH=true: push them).
ifeq ($(IMAGES_PUSH),true)
	$(OLM) images build --push $(IMAGES_FLAGS)
else
	$(OLM) images build $(IMAGES_FLAGS)
endif

##@ Deployment

# The kustomize configuration make deploy and make undeploy apply: config/default (the
# operator keeps its own webhook certificate), or config/certmanager on a cluster where
# cert-manager issues it (docs/deploy.md).
DEPLOY_CONFIG ?= config/default
# How long make undeploy waits for the StorageBuckets and Foos to go before it stops
# (and leaves the operator running to finish them).
UNDEPLOY_TIMEOUT ?= 5m
# The manager image config/manager names, which IMG replaces.
MANAGER_IMAGE := quay.io/phalanks/phalanks-operator

# kustomize-build renders the configuration $(1) with the manager image IMG, through a
# temporary overlay under bin/, so that deploying changes no committed file.
define kustomize-build
tmp=$$(mktemp -d $(BIN)/deploy.XXXXXX) && trap 'rm -rf "$$tmp"' EXIT && \
	(cd "$$tmp" && $(KUSTOMIZE) create --resources ../../$(1) && $(KUSTOMIZE) edit set image $(MANAGER_IMAGE)=$(IMG)) && \
	$(KUSTOMIZE) build "$$tmp"
endef

.PHONY: install
install: tools-for-install manifests ## Install the CRDs into the cluster of the current kubeconfig.
	$(KUSTOMIZE) build config/crd | $(KUBECTL) apply --server-side -f -

.PHONY: uninstall
uninstall: tools-for-uninstall manifests ## Remove the CRDs (and every custom resource) from the cluster.
	$(KUSTOMIZE) build config/crd | $(KUBECTL) delete --ignore-not-found -f -

# --force-conflicts: the operator owns its Deployment's replica count once it changed it
# (--operator-replicas); a deploy sets config/manager's again, and the operator then
# raises it back (docs/configuration.md, "The operator's replica count").
.PHONY: deploy
deploy: tools-for-deploy manifests ## Deploy the operator image IMG with kustomize (DEPLOY_CONFIG: config/default, or config/certmanager).
	$(call kustomize-build,$(DEPLOY_CONFIG)) | $(KUBECTL) apply --server-side --force-conflicts -f -

.PHONY: deploy-monitoring
deploy-monitoring: tools-for-deploy-monitoring manifests ## Deploy like deploy, plus a ServiceMonitor scraping the metrics over verified TLS and the alerting rules (needs the Prometheus Operator).
	$(call kustomize-build,config/prometheus) | $(KUBECTL) apply --server-side --force-conflicts -f -

# The StorageBuckets and Foos go first, while the operator still runs: it deletes or
# keeps each bucket by its deletionPolicy, and a finalizer it cannot complete stops
# undeploy here instead of leaving the CRD and its namespace stuck terminating.
.PHONY: undeploy
undeploy: tools-for-undeploy ## Remove the operator: its StorageBuckets and Foos first (buckets by their deletionPolicy), then everything deploy applied.
	@if $(KUBECTL) get crd storagebuckets.phalanks.io foos.phalanks.io >/dev/null 2>&1; then \
		echo "undeploy: deleting every StorageBucket and Foo while the operator runs (up to $(UNDEPLOY_TIMEOUT))"; \
		if ! $(KUBECTL) delete storagebuckets.phalanks.io,foos.phalanks.io --all --all-namespaces --wait --timeout=$(UNDEPLOY_TIMEOUT); then \
			echo "undeploy: stopped; these StorageBuckets are still being deleted (their Ready condition says why), the operator keeps running:"; \
			$(KUBECTL) get storagebuckets.phalanks.io --all-namespaces; \
			exit 1; \
		fi; \
	fi
	$(call kustomize-build,$(DEPLOY_CONFIG)) | $(KUBECTL) delete --ignore-not-found -f -

##@ OLM

.PHONY: bundle
bundle: tools-for-bundle manifests ## Generate bundle/ and bundle.Dockerfile for VERSION with operator-sdk (IMG, SCORECARD_TEST_IMG; USE_IMAGE_DIGESTS=true pins them by digest), then validate it.
	$(OPERATOR_SDK) generate kustomize manifests -q
	cd config/manager && $(KUSTOMIZE) edit set image controller=$(IMG)
	cd config/scorecard && $(KUSTOMIZE) edit set image custom-scorecard-tests=$(SCORECARD_TEST_IMG)
	$(KUSTOMIZE) build config/manifests | $(OPERATOR_SDK) generate bundle $(BUNDLE_GEN_FLAGS)
	hack/bundle-created-at.sh bundle/manifests/phalanks-operator.clusterserviceversion.yaml
	$(OPERATOR_SDK) bundle validate ./bundle

# What OperatorHub's pipelines run on a bundle: every optional validator of the
# operatorframework suite. operator-sdk exits 0 on warnings; a warning fails here too,
# shown as the validator printed it.
.PHONY: bundle-validate
bundle-validate: tools-for-bundle-validate ## Validate BUNDLE_DIR (bundle/) with operator-sdk and the operatorframework suite; any error or warning fails.
	@out=$$($(OPERATOR_SDK) bundle validate $(BUNDLE_DIR) --select-optional suite=operatorframework 2>&1) || { echo "$$out"; exit 1; }; \
	echo "$$out"; \
	if grep -qE 'level=(warning|error)' <<<"$$out"; then echo "bundle-validate: the validators above reported warnings or errors"; exit 1; fi

.PHONY: bundle-build
bundle-build: tools-for-bundle-build ## Build the bundle image BUNDLE_IMG from BUNDLE_DIR (bundle/; no container runtime) into IMAGE_LAYOUT.
	$(OLM) images build --only bundle $(IMAGES_FLAGS)

.PHONY: bundle-push
bundle-push: tools-for-bundle-push ## Push the bundle image BUNDLE_IMG from IMAGE_LAYOUT.
	$(OLM) images push --only bundle $(IMAGES_FLAGS)

# The bundle image is rendered from a registry: a loopback one the command starts, or
# with CATALOG_RENDER_FROM=BUNDLE_IMG the registry make bundle-push pushed it to.
CATALOG_RENDER_FROM ?=
.PHONY: catalog
catalog: tools-for-catalog bundle ## Render the bundle image (BUNDLE_IMG, by digest) from a registry as the head of the stable channel in catalog/.
	$(OLM) catalog --bundle-image $(BUNDLE_IMG) --from "$(CATALOG_RENDER_FROM)" --plain-http=$(REGISTRY_PLAIN_HTTP)

.PHONY: catalog-build
catalog-build: tools-for-catalog-build ## Build the catalog image CATALOG_IMG (opm serving catalog/, no container runtime) into IMAGE_LAYOUT.
	$(OLM) images build --only catalog $(IMAGES_FLAGS)

.PHONY: catalog-push
catalog-push: tools-for-catalog-push ## Push the catalog image CATALOG_IMG from IMAGE_LAYOUT.
	$(OLM) images push --only catalog $(IMAGES_FLAGS)

.PHONY: scorecard-image-build
scorecard-image-build: tools-for-scorecard-image-build ## Build the custom scorecard test image SCORECARD_TEST_IMG (no container runtime) into IMAGE_LAYOUT.
	$(OLM) images build --only scorecard-tests $(IMAGES_FLAGS)

.PHONY: scorecard-image-push
scorecard-image-push: tools-for-scorecard-image-push ## Push the custom scorecard test image SCORECARD_TEST_IMG from IMAGE_LAYOUT.
	$(OLM) images push --only scorecard-tests $(IMAGES_FLAGS)

# What a pull request to OperatorHub's community catalogs (k8s-operatorhub/community-operators,
# redhat-openshift-ecosystem/community-operators-prod) holds, checked as their pipelines
# check it: operator-sdk's validators against the newest Kubernetes we support, the CSV's
# required fields, the layout, the catalogs and their template, yamllint (Debian's).
OPERATORHUB_DIR ?= $(BIN)/operatorhub
OPERATORHUB_K8S_VERSION ?= 1.37
.PHONY: operatorhub
operatorhub: tools-for-operatorhub ## Lay out the OperatorHub pull request in OPERATORHUB_DIR and run the hubs' static checks on it.
	@hack/tools/apt.sh yamllint=yamllint
	go -C $(OLM_MODULE) run -tags $(OLM_GO_TAGS) ./cmd/operatorhub --out $(OPERATORHUB_DIR) --k8s-version $(OPERATORHUB_K8S_VERSION)

.PHONY: validate-multiarch
validate-multiarch: tools-for-validate-multiarch ## Run operator-sdk's multiarch validator itself, with podman, on the bundle pinned to the operator image built here (needs root and podman).
	go -C $(OLM_MODULE) test -tags podman,$(OLM_GO_TAGS) -count=1 -timeout=40m -run TestOperatorSDKMultiarchValidatorWithPodman -v ./validate/

# operator-sdk scorecard runs every test of the bundle's configuration as a pod in the
# cluster of the current kubeconfig: the built-in basic and olm suites need only the
# bundle, the custom suite the operator installed (operator-sdk run bundle, or OLM).
# docs/olm.md gives the namespace and service account the custom tests need.
SCORECARD_FLAGS ?= --pod-security=restricted --wait-time=10m
.PHONY: scorecard
scorecard: tools-for-scorecard ## Run operator-sdk scorecard on BUNDLE_DIR (bundle/) in the cluster of the current kubeconfig (SCORECARD_FLAGS).
	$(OPERATOR_SDK) scorecard $(BUNDLE_DIR) $(SCORECARD_FLAGS)

##@ Release

# A release freezes the head being developed (VERSION, which must be the Makefile's own)
# and moves the head on to NEXT_VERSION (empty: the next patch version); docs/olm.md,
# "Cutting a release". DRY_RUN=true does all of it in a copy of the tree, its images in a
# registry on loopback, and changes and pushes nothing; RELEASE_KEEP=DIR keeps the copy.
NEXT_VERSION ?=
DRY_RUN ?= false
RELEASE_KEEP ?=
.PHONY: release
release: tools-for-release ## Release VERSION: push its images, freeze its bundle pinned by digest in hack/olm/releases/VERSION, make it the catalog's entry, date CHANGELOG.md, move the head to NEXT_VERSION (DRY_RUN=true changes nothing).
	go -C $(OLM_MODULE) run -tags $(OLM_GO_TAGS) ./cmd/release --version $(VERSION) --next "$(NEXT_VERSION)" --image-registry $(IMAGE_REGISTRY) \
		--plain-http=$(REGISTRY_PLAIN_HTTP) --dry-run=$(DRY_RUN) $(if $(RELEASE_KEEP),--keep $(RELEASE_KEEP))

##@ Tools

# The tool sets each target needs (hack/tools/build.sh --list names the binaries of each).
# A target builds them itself, as its first prerequisite, so every command works as the
# first one in a fresh clone; test/makefile checks these lists against what each
# target's recipes and Go programs actually call.
TOOLS_manifests := gen
TOOLS_generate := gen
TOOLS_lint := lint
TOOLS_vulncheck := vuln
TOOLS_verify := gen sdk
TOOLS_bundle := gen sdk
TOOLS_bundle-validate := sdk
TOOLS_catalog := gen sdk
# A release runs make bundle (twice) and make catalog.
TOOLS_release := gen sdk
TOOLS_run := gen
TOOLS_install := gen kubectl
TOOLS_uninstall := gen kubectl
TOOLS_deploy := gen kubectl
TOOLS_deploy-monitoring := gen kubectl
TOOLS_undeploy := gen kubectl
# The cluster's sets first, so that the cluster starts as early as it can; MinIO is
# built in the background meanwhile (TOOLS_LATER_demo), and kwok too: the cluster package
# can run fake nodes, though the demo's node is a real one. kubectl is built with kube and
# node, by the same go build: in the background it compiled the Kubernetes packages a
# second time, beside the foreground build (4m54s on two cores, from empty caches).
TOOLS_demo := gen kube node containerd cni kubectl minio kwok
TOOLS_test := gen sdk kube kubectl kwok minio node containerd cni krew prometheus prometheus-operator versitygw $(KUBE_OLDEST)
# The local cluster's package can also start a real node, so its tests need the node's
# sets built although these suites run fake nodes only; the StorageBucket controller's
# suite can run versitygw in MinIO's place.
TOOLS_test-k8s-versions := gen kube kubectl kwok minio versitygw node containerd cni $(filter-out kube,$(KUBE_VERSIONS))
TOOLS_test-e2e := $(TOOLS_demo)
# The chaos spec runs an API server and MinIO; its package also holds local-cluster specs.
TOOLS_chaos := gen kube kwok minio node containerd cni
# The daemonless build the images are compared with runs hack/olm's command (gen).
TOOLS_test-images := gen
TOOLS_test-olm := gen sdk kube kubectl kwok minio olm node containerd cni
TOOLS_test-olmv1 := $(TOOLS_test-olm) olmv1
# make deploy (gen, kubectl), make bundle of both releases (sdk), the real node, MinIO.
# Its binary links test/olm's package, which can start OLM (olm) and a fake-node cluster
# (kwok), though the suite runs neither.
TOOLS_test-upgrade := gen sdk kube kubectl kwok minio olm node containerd cni
TOOLS_bench := kube kwok minio peers
TOOLS_plugin-dist := krew
TOOLS_scorecard := sdk
TOOLS_operatorhub := sdk
TOOLS_validate-multiarch := gen sdk
# The image targets run hack/olm's command, which can also render the bundle (kustomize).
TOOLS_docker-build := gen
TOOLS_docker-push := gen
TOOLS_images := gen
TOOLS_bundle-build := gen
TOOLS_bundle-push := gen
TOOLS_catalog-build := gen
TOOLS_catalog-push := gen
TOOLS_scorecard-image-build := gen
TOOLS_scorecard-image-push := gen

# The sets of TOOLS_<target> that only a target's later steps use: they are built in the
# background, at the lowest priority, while the first steps run, and a program that looks
# one up (test/harness/tools) waits for it. The suites spend most of their time waiting,
# and these builds take that time rather than adding to the run's.
TOOLS_LATER_demo := minio kwok
TOOLS_LATER_test := krew prometheus prometheus-operator versitygw $(KUBE_OLDEST)

# tools-for-<target> starts the background builds of TOOLS_LATER_<target>, then builds
# (or links from the cache) the rest of TOOLS_<target> in one go, so a first run prints one
# plan with every set it is about to build, then installs the Debian commands the target
# runs.
tools-for-%:
	$(if $(strip $(call tools_later,$*)),@hack/tools/build.sh --background $(call tools_later,$*))
	@hack/tools/build.sh $(filter-out $(call tools_later,$*),$(or $(TOOLS_$*),$(error no TOOLS_$* in the Makefile)))
	$(if $(strip $(call debian_packages,$*)),@hack/tools/apt.sh $(call debian_packages,$*))

tools_later = $(filter $(TOOLS_LATER_$1),$(TOOLS_$1))

# CI (.ci/run) builds these in the background while make test runs: what the OLM targets
# need beyond what the README's commands build, so that a set missing from TOOLS_demo or
# TOOLS_test still fails CI as it would fail a newcomer.
.PHONY: tools-ahead-ci
tools-ahead-ci:
	@hack/tools/build.sh --background $(filter-out $(TOOLS_demo) $(TOOLS_test),$(TOOLS_test-olmv1))

# The commands from Debian (command=package) a target runs, installed when missing: the
# real node's for the targets that run one, and the target's own DEBIAN_<target>.
debian_packages = $(if $(filter node,$(TOOLS_$1)),$(NODE_PACKAGES)) $(DEBIAN_$1)

# The real node's commands from Debian (command=package), installed when missing: runc
# (containerd runs pods with it), iptables (kube-proxy, the CNI portmap plugin), ip (the
# node's network namespace), a static busybox (the images that stand in for OLM's util
# image and operator-sdk scorecard's untar image).
NODE_PACKAGES := runc=runc iptables=iptables ip=iproute2 busybox=busybox-static

# tinyproxy is the egress proxy of the StorageBucket e2e suite (test/harness/tinyproxy),
# which both targets run; make test's hack/olm suites also run the OperatorHub checks
# (yamllint), beside make operatorhub, so the suites cannot count on it to install it.
DEBIAN_test := tinyproxy=tinyproxy yamllint=yamllint
# test/dockerfiles builds the Dockerfiles with buildah, and the base image it makes for
# RUN has a static busybox for its shell.
DEBIAN_test-images := buildah=buildah busybox=busybox-static
DEBIAN_test-k8s-versions := tinyproxy=tinyproxy
# The OLM suites install the operator behind an egress proxy: from the Subscription's
# environment (test/olm/egress_test.go), from the configuration ConfigMap (test/olmv1).
DEBIAN_test-olm := tinyproxy=tinyproxy
DEBIAN_test-olmv1 := tinyproxy=tinyproxy

.PHONY: tools
tools: ## Build every default tool set into the per-machine cache (hack/tools/build.sh).
	hack/tools/build.sh

# tools-<set> builds one set, for every set hack/tools/build.sh knows (test/makefile checks
# it); tools-olm builds OLM's set, tools-node the node with containerd and the CNI
# plugins.
TOOL_SETS := gen lint kube kubectl kwok minio sdk peers containerd ctr cni krew prometheus prometheus-operator olmv1 vuln versitygw $(filter-out kube,$(KUBE_VERSIONS))
.PHONY: $(addprefix tools-,$(TOOL_SETS)) tools-runtime tools-node tools-olm
$(addprefix tools-,$(TOOL_SETS)): tools-%:
	@hack/tools/build.sh $*
tools-runtime: ## Build the sets the local cluster and MinIO harnesses run (kube, kubectl, kwok, minio).
	@hack/tools/build.sh kube kubectl kwok minio
tools-node: ## Build the real node's kubelet, kube-proxy, containerd and CNI plugins; install runc, iptables and ip from Debian when missing.
	@hack/tools/build.sh node containerd cni
	@hack/tools/apt.sh $(NODE_PACKAGES)
tools-olm: ## Build OLM (olm, catalog, package-server) for the OLM end-to-end test.
	@hack/tools/build.sh olm
