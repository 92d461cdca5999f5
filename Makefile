# nodelet — build, run and test. Only Go is needed: everything else,
# including the local control plane, is built from the Go module proxy.

GO ?= go
export PATH := $(dir $(shell command -v $(GO) 2>/dev/null || echo /usr/local/go/bin/go)):$(PATH)

K8S_VERSION := v1.36.3
CONTROLPLANE_LDFLAGS := -s -w \
	-X k8s.io/component-base/version.gitVersion=$(K8S_VERSION) \
	-X k8s.io/component-base/version.gitMajor=1 \
	-X k8s.io/component-base/version.gitMinor=36 \
	-X k8s.io/component-base/version.gitTreeState=clean

LOCAL := .local
KUBECONFIG_LOCAL := $(LOCAL)/controlplane/admin.kubeconfig
KUBECTL := bin/controlplane kubectl --kubeconfig $(KUBECONFIG_LOCAL)
NODE_NAME ?= nodelet-0
# make run's provider: cri (container images through a private containerd;
# needs root), process (real host processes; needs root) or sim.
PROVIDER ?= cri
TEST_TIMEOUT ?= 40m

.PHONY: build run stop test unit e2e e2e-karpenter vet bench bench-process clean

build: bin/controlplane bin/nodelet

bin/controlplane: $(wildcard hack/controlplane/*.go) hack/controlplane/go.mod hack/controlplane/go.sum
	cd hack/controlplane && $(GO) build -o ../../bin/controlplane -ldflags "$(CONTROLPLANE_LDFLAGS)" .

# The CSI external-attacher sidecar that the end-to-end tests run; its own
# module in hack/csi-attacher pins the release.
bin/csi-attacher: hack/csi-attacher/go.mod hack/csi-attacher/go.sum
	cd hack/csi-attacher && $(GO) build -o ../../bin/csi-attacher \
		-ldflags "-s -w -X main.version=$$($(GO) list -m -f '{{.Version}}' github.com/kubernetes-csi/external-attacher/v4)" \
		github.com/kubernetes-csi/external-attacher/v4/cmd/csi-attacher

test e2e: bin/csi-attacher

# metrics-server, which bin/controlplane up --metrics-server runs as the
# metrics.k8s.io APIService for kubectl top (make run and the end-to-end
# tests); its own module in hack/metrics-server pins the release.
bin/metrics-server: hack/metrics-server/go.mod hack/metrics-server/go.sum
	cd hack/metrics-server && CGO_ENABLED=0 $(GO) build -o ../../bin/metrics-server \
		-ldflags "-s -w -X k8s.io/client-go/pkg/version.gitVersion=$$($(GO) list -m -f '{{.Version}}' sigs.k8s.io/metrics-server)" \
		sigs.k8s.io/metrics-server/cmd/metrics-server

test e2e: bin/metrics-server

# Karpenter's kwok provider, the autoscaler that TestKarpenterDrivesNodelet
# runs against nodelet's sim agent (docs/kwok.md); its own module in
# hack/karpenter pins the release.
bin/karpenter-kwok: hack/karpenter/go.mod hack/karpenter/go.sum
	cd hack/karpenter && CGO_ENABLED=0 $(GO) build -o ../../bin/karpenter-kwok \
		-ldflags "-s -w -X sigs.k8s.io/karpenter/pkg/operator.Version=$$($(GO) list -m -f '{{.Version}}' sigs.k8s.io/karpenter)" \
		sigs.k8s.io/karpenter/kwok

# e2e-karpenter: that test (build tag karpenter), out of make test: building
# Karpenter takes 5 to 8 minutes of CI's 2 cores for a test of one minute.
# make vet compiles it.
e2e-karpenter: build bin/metrics-server bin/karpenter-kwok
	$(GO) test -tags karpenter -count=1 -run TestKarpenterDrivesNodelet ./test/e2e

# containerd and its runc shim for the cri provider's tests, from the Go
# module proxy; hack/containerd pins the release. Without cgo, the btrfs,
# devmapper and zfs snapshotters are left out. The version is read in
# hack/containerd, where the recipes run.
CONTAINERD_TAGS := no_btrfs no_devmapper no_zfs
CONTAINERD_LDFLAGS = -s -w -X github.com/containerd/containerd/v2/version.Version=$$($(GO) list -m -f '{{.Version}}' github.com/containerd/containerd/v2)

bin/containerd: hack/containerd/go.mod hack/containerd/go.sum
	cd hack/containerd && CGO_ENABLED=0 GOFLAGS=-mod=mod $(GO) build -tags "$(CONTAINERD_TAGS)" \
		-o ../../bin/containerd -ldflags "$(CONTAINERD_LDFLAGS)" github.com/containerd/containerd/v2/cmd/containerd

bin/containerd-shim-runc-v2: hack/containerd/go.mod hack/containerd/go.sum
	cd hack/containerd && CGO_ENABLED=0 GOFLAGS=-mod=mod $(GO) build -tags "$(CONTAINERD_TAGS)" \
		-o ../../bin/containerd-shim-runc-v2 -ldflags "$(CONTAINERD_LDFLAGS)" github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2

# cri-deps: runc, the CNI plugins (bridge, host-local, loopback, portmap in
# /usr/lib/cni) and iptables (for kube-proxy) from Debian's packages,
# installed only when missing (needs root then; a no-op once they are
# there).
CNI_BIN_DIR := /usr/lib/cni
.PHONY: cri-deps
cri-deps:
	@missing=; \
	command -v runc >/dev/null 2>&1 || [ -x /usr/sbin/runc ] || missing="$$missing runc"; \
	command -v iptables-restore >/dev/null 2>&1 || [ -x /usr/sbin/iptables-restore ] || missing="$$missing iptables"; \
	for p in bridge host-local loopback portmap; do \
		[ -x $(CNI_BIN_DIR)/$$p ] || { missing="$$missing containernetworking-plugins"; break; }; \
	done; \
	if [ -n "$$missing" ]; then \
		echo "installing$$missing"; \
		apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $$missing; \
	fi

test e2e: bin/containerd bin/containerd-shim-runc-v2 cri-deps

# images: the container images the cri tests run, built from source into an
# OCI image layout in IMAGES_DIR by hack/images (its own module, which pins
# agnhost's Kubernetes release and etcd): busybox (built from Debian's source
# package), agnhost, pause, the other images of the node conformance tests
# and those of the other conformance specs (glibc-dns-testing, kitten,
# nautilus, sample-apiserver, etcd). Rebuilt only when an input changes.
# `bin/images serve --dir $(IMAGES_DIR)` serves them as a registry on
# loopback.
IMAGES_DIR := $(LOCAL)/images
BUSYBOX := bin/busybox
IMAGES_GOFLAGS := -trimpath -ldflags "-s -w"
.PHONY: images images-test
images: $(IMAGES_DIR)/index.json

# agnhost also carries Debian's curl and netcat-openbsd with their shared
# libraries, and porter's TLS certificate and key from its source, as
# upstream's image has them (the networking and hook tests use them).
# Debian's dig, host, nslookup and getent (the DNS specs) are a layer that
# agnhost and glibc-dns-testing share; glibc-dns-testing adds Debian's
# hostname (the hostnameOverride specs). kitten and nautilus serve the
# pictures of k8s.io/kubernetes' test/images.
CURL := /usr/bin/curl
NC_OPENBSD := /bin/nc.openbsd
DIG := /usr/bin/dig
DNS_HOST := /usr/bin/host
NSLOOKUP := /usr/bin/nslookup
GETENT := /usr/bin/getent
HOSTNAME_CMD := /bin/hostname
DEB_TOOLS := $(CURL) $(NC_OPENBSD) $(DIG) $(DNS_HOST) $(NSLOOKUP) $(GETENT) $(HOSTNAME_CMD)
$(IMAGES_DIR)/index.json: bin/images bin/agnhost bin/pause bin/nnp bin/etcd bin/sample-apiserver $(BUSYBOX) $(DEB_TOOLS)
	k8s=$$(cd hack/images && $(GO) list -m -f '{{.Dir}}' k8s.io/kubernetes)/test/images; \
	bin/images build --dir $(IMAGES_DIR) --busybox $(BUSYBOX) --agnhost bin/agnhost --pause bin/pause --nnp bin/nnp \
		--etcd bin/etcd --sample-apiserver bin/sample-apiserver \
		--tool usr/bin/curl=$(CURL) --tool usr/bin/nc=$(NC_OPENBSD) \
		--file localhost.crt=$$k8s/agnhost/porter/localhost.crt --file localhost.key=$$k8s/agnhost/porter/localhost.key \
		--dns-tool usr/bin/dig=$(DIG) --dns-tool usr/bin/host=$(DNS_HOST) --dns-tool usr/bin/nslookup=$(NSLOOKUP) \
		--dns-tool usr/bin/getent=$(GETENT) --glibc-tool bin/hostname=$(HOSTNAME_CMD) \
		--kitten $$k8s/kitten/html/kitten.jpg --nautilus $$k8s/nautilus/html/nautilus.jpg

bin/images: $(filter-out %_test.go,$(wildcard hack/images/*.go)) hack/images/go.mod hack/images/go.sum
	cd hack/images && CGO_ENABLED=0 $(GO) build $(IMAGES_GOFLAGS) -o ../../bin/images .

bin/pause: $(wildcard hack/images/pause/*.go) hack/images/go.mod
	cd hack/images && CGO_ENABLED=0 $(GO) build $(IMAGES_GOFLAGS) -o ../../bin/pause ./pause

bin/agnhost: hack/images/go.mod hack/images/go.sum
	cd hack/images && CGO_ENABLED=0 $(GO) build $(IMAGES_GOFLAGS) -o ../../bin/agnhost k8s.io/kubernetes/test/images/agnhost

bin/nnp: hack/images/go.mod hack/images/go.sum
	cd hack/images && CGO_ENABLED=0 $(GO) build $(IMAGES_GOFLAGS) -o ../../bin/nnp k8s.io/kubernetes/test/images/nonewprivs

# etcd at the release of the etcd image's tag (3.6.8), the one Kubernetes
# v1.36.3 uses.
bin/etcd: hack/images/go.mod hack/images/go.sum
	cd hack/images && CGO_ENABLED=0 $(GO) build $(IMAGES_GOFLAGS) -o ../../bin/etcd go.etcd.io/etcd/server/v3

# sample-apiserver at the release of its image's tag (1.29.2: the
# Aggregator spec runs an older sample-apiserver against the current
# aggregator), a module of its own as its Kubernetes libraries are that
# release's.
bin/sample-apiserver: hack/images/sampleapiserver/go.mod hack/images/sampleapiserver/go.sum
	cd hack/images/sampleapiserver && CGO_ENABLED=0 $(GO) build $(IMAGES_GOFLAGS) -o ../../../bin/sample-apiserver k8s.io/sample-apiserver

# busybox: built static from Debian's source package (hack/images/build-busybox.sh
# pins it), configured as upstream's image (defconfig; Debian's busybox-static
# config lacks wget -T, nc -z, ...) and keeping upstream's ash, which passes
# on environment variables whose names are not shell identifiers.
$(BUSYBOX): hack/images/build-busybox.sh
	hack/images/build-busybox.sh $@

DEB_OF_$(CURL) := curl
DEB_OF_$(NC_OPENBSD) := netcat-openbsd
DEB_OF_$(DIG) := bind9-dnsutils
DEB_OF_$(DNS_HOST) := bind9-dnsutils
DEB_OF_$(NSLOOKUP) := bind9-dnsutils
DEB_OF_$(GETENT) := libc-bin
DEB_OF_$(HOSTNAME_CMD) := hostname
$(DEB_TOOLS):
	DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $(DEB_OF_$@) || \
		{ apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $(DEB_OF_$@); }

# image: nodelet's own image, built with go-containerregistry (no Docker
# daemon) by bin/images from a static nodelet (CGO_ENABLED=0, -trimpath, so
# the same tree gives the same digest), as the only image of the OCI layout
# $(IMAGE_DIR), named $(NODELET_IMAGE). image-push copies it to a registry:
# make image-push IMAGE_TO=registry.example.com/nodelet/nodelet:v0.1.0 (with
# the credentials of ~/.docker/config.json).
NODELET_VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
NODELET_IMAGE ?= nodelet.io/nodelet:$(NODELET_VERSION)
IMAGE_DIR := $(LOCAL)/nodelet-image
IMAGE_TO ?=
.PHONY: image image-push
image: bin/images
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "-s -w" -o $(IMAGE_DIR)/bin/nodelet ./cmd/nodelet
	bin/images nodelet --dir $(IMAGE_DIR)/oci --nodelet $(IMAGE_DIR)/bin/nodelet --ref $(NODELET_IMAGE) \
		--revision "$$(git rev-parse HEAD 2>/dev/null)"

image-push: image
	@[ -n "$(IMAGE_TO)" ] || { echo "set IMAGE_TO=REGISTRY/REPOSITORY:TAG"; exit 1; }
	bin/images push --dir $(IMAGE_DIR)/oci --to $(IMAGE_TO)

# images-test: hack/images' own tests (build a few images, serve, pull; run
# the built busybox's applets against servers on loopback, and the DNS
# specs' probe in agnhost and glibc-dns-testing with Debian's tools).
images-test: $(BUSYBOX) $(DIG) $(DNS_HOST) $(NSLOOKUP) $(GETENT) $(HOSTNAME_CMD)
	cd hack/images && $(GO) test ./...

test e2e: images
test: images-test

# Kubernetes' own end-to-end tests: e2e.test, the ginkgo runner it was built
# with and kube-proxy, from k8s.io/kubernetes $(K8S_VERSION) in hack/e2e
# (its own module; the test binary's test-only dependencies need
# -mod=mod). CoreDNS comes from hack/coredns.
E2E_GOFLAGS := GOFLAGS=-mod=mod
bin/e2e.test: hack/e2e/go.mod hack/e2e/go.sum
	cd hack/e2e && $(E2E_GOFLAGS) $(GO) test -c -o ../../bin/e2e.test -ldflags "$(CONTROLPLANE_LDFLAGS)" k8s.io/kubernetes/test/e2e

# bin/e2e_node.test: Kubernetes' node e2e suite (test/e2e_node), whose
# --conformance mode tests a node agent that is already running (make
# node-conformance).
bin/e2e_node.test: hack/e2e/go.mod hack/e2e/go.sum
	cd hack/e2e && $(E2E_GOFLAGS) $(GO) test -c -o ../../bin/e2e_node.test -ldflags "$(CONTROLPLANE_LDFLAGS)" k8s.io/kubernetes/test/e2e_node

bin/ginkgo: hack/e2e/go.mod hack/e2e/go.sum
	cd hack/e2e && $(E2E_GOFLAGS) $(GO) build -o ../../bin/ginkgo github.com/onsi/ginkgo/v2/ginkgo

bin/kube-proxy: hack/e2e/go.mod hack/e2e/go.sum
	cd hack/e2e && $(E2E_GOFLAGS) $(GO) build -o ../../bin/kube-proxy -ldflags "$(CONTROLPLANE_LDFLAGS)" k8s.io/kubernetes/cmd/kube-proxy

bin/coredns: hack/coredns/go.mod hack/coredns/go.sum
	cd hack/coredns && CGO_ENABLED=0 $(E2E_GOFLAGS) $(GO) build -o ../../bin/coredns -ldflags "-s -w" github.com/coredns/coredns

# Built each time (go's cache makes it quick), as bin/nodelet: it compiles
# in the selections and skips of test/conformance, which a stale runner
# would run without.
.PHONY: bin/conformance conformance
bin/conformance:
	$(GO) build -o bin/conformance ./hack/conformance

# conformance: the certification set ([Conformance] over the whole of
# e2e.test) and every [NodeConformance] spec against a cri node on a fresh
# local cluster with CoreDNS and kube-proxy (needs root); fails when a spec
# fails or something is left behind. Reports and summary.md in
# .local/conformance; CONFORMANCE_FLAGS are passed to hack/conformance (for
# example --providers cri,process --focus 'ConfigMap').
CONFORMANCE_FLAGS ?=
conformance: build bin/e2e.test bin/ginkgo bin/kube-proxy bin/coredns bin/conformance \
		bin/containerd bin/containerd-shim-runc-v2 cri-deps images
	bin/conformance --out $(LOCAL)/conformance --images $(IMAGES_DIR) $(CONFORMANCE_FLAGS)

# node-conformance: Kubernetes' node conformance test (e2e_node.test
# --conformance, every [NodeConformance] spec but the skipped ones of
# NodeSkips in test/conformance) against a cri node on the same kind of
# fresh local cluster (needs root). Reports and summary.md in
# .local/node-conformance; CONFORMANCE_FLAGS as above.
.PHONY: node-conformance
node-conformance: build bin/e2e_node.test bin/ginkgo bin/kube-proxy bin/coredns bin/conformance \
		bin/containerd bin/containerd-shim-runc-v2 cri-deps images
	bin/conformance --suite node --out $(LOCAL)/node-conformance --images $(IMAGES_DIR) $(CONFORMANCE_FLAGS)

# The smoke set of the conformance tests runs in make test (test/e2e), and
# a cluster with CoreDNS and kube-proxy, as make run's; so does the node
# conformance test's, through the runner (bin/conformance --suite node).
test e2e: bin/e2e.test bin/coredns bin/kube-proxy bin/e2e_node.test bin/ginkgo bin/conformance

# Always handed to go build, which knows when nothing changed.
.PHONY: bin/nodelet
bin/nodelet:
	$(GO) build -o bin/nodelet ./cmd/nodelet
	CGO_ENABLED=0 $(GO) build -o bin/nodelet-shim ./cmd/nodelet-shim

# run: a local control plane in .local/, one nodelet node, a sample
# workload. With PROVIDER=cri, criup first runs the registry of make images
# and a private containerd that mirrors registry.k8s.io and docker.io to it.
# With cri and process, addonsup runs the cluster's DNS (CoreDNS behind the
# kube-dns Service) and Service proxy (kube-proxy) for the node, which
# joins at the address the API server advertises to pods.
ifeq ($(PROVIDER),cri)
RUN_DEPS := bin/containerd bin/containerd-shim-runc-v2 cri-deps images bin/criup
RUN_FLAGS = --container-runtime-endpoint $$(cat $(LOCAL)/cri-endpoint) --pod-logs-dir $(CURDIR)/$(LOCAL)/logs/pods
ADDONS_FLAGS := --cluster-cidr-file $(LOCAL)/cri-subnet
endif
ifneq ($(PROVIDER),sim)
RUN_DEPS += bin/coredns bin/kube-proxy bin/addonsup cri-deps
RUN_FLAGS += --cluster-dns 10.96.0.10 --cluster-domain cluster.local
endif

.PHONY: bin/criup bin/addonsup
bin/criup:
	$(GO) build -o bin/criup ./hack/criup

bin/addonsup:
	$(GO) build -o bin/addonsup ./hack/addonsup

run: build bin/metrics-server $(RUN_DEPS)
	@mkdir -p $(LOCAL)
	@if [ -f $(LOCAL)/controlplane.pid ] && kill -0 $$(cat $(LOCAL)/controlplane.pid) 2>/dev/null; then \
		echo "control plane already running"; \
	else \
		nohup bin/controlplane up --dir $(LOCAL)/controlplane --metrics-server $(CURDIR)/bin/metrics-server > $(LOCAL)/controlplane.log 2>&1 & echo $$! > $(LOCAL)/controlplane.pid; \
	fi
	@if [ "$(PROVIDER)" = cri ]; then \
		if [ -f $(LOCAL)/criup.pid ] && kill -0 $$(cat $(LOCAL)/criup.pid) 2>/dev/null; then \
			echo "containerd already running"; \
		else \
			rm -f $(LOCAL)/cri-endpoint; \
			nohup bin/criup --images $(IMAGES_DIR) --registry bin/images --endpoint-file $(LOCAL)/cri-endpoint \
				--dir-file $(LOCAL)/cri-dir --subnet-file $(LOCAL)/cri-subnet > $(LOCAL)/criup.log 2>&1 & echo $$! > $(LOCAL)/criup.pid; \
		fi; \
		for i in $$(seq 1 120); do [ -s $(LOCAL)/cri-endpoint ] && break; sleep 1; done; \
		[ -s $(LOCAL)/cri-endpoint ] || { echo "containerd not ready; see $(LOCAL)/criup.log"; exit 1; }; \
	fi
	@for i in $$(seq 1 180); do [ -f $(LOCAL)/controlplane/ready ] && break; sleep 1; done; \
		[ -f $(LOCAL)/controlplane/ready ] || { echo "control plane not ready; see $(LOCAL)/controlplane.log"; exit 1; }
	@mkdir -p $(LOCAL)/manifests
	@printf 'apiVersion: nodelet.io/v1alpha1\nkind: NodeletConfiguration\n' > $(LOCAL)/nodelet.yaml
	@if [ "$(PROVIDER)" != sim ]; then echo "staticPodPath: $(CURDIR)/$(LOCAL)/manifests" >> $(LOCAL)/nodelet.yaml; fi
	@if [ -f $(LOCAL)/nodelet.pid ] && kill -0 $$(cat $(LOCAL)/nodelet.pid) 2>/dev/null; then \
		echo "nodelet already running"; \
	else \
		address=127.0.0.1; \
		if [ "$(PROVIDER)" != sim ]; then \
			address=$$($(KUBECTL) get endpointslice -n default kubernetes -o jsonpath='{.endpoints[0].addresses[0]}'); \
			[ -n "$$address" ] || { echo "the API server advertises no address pods reach; see $(LOCAL)/controlplane.log"; exit 1; }; \
		fi; \
		nohup bin/nodelet --config $(LOCAL)/nodelet.yaml --bootstrap-kubeconfig $(LOCAL)/controlplane/bootstrap.kubeconfig \
			--kubeconfig $(CURDIR)/$(LOCAL)/nodelet/kubeconfig --node-name $(NODE_NAME) --provider $(PROVIDER) \
			--root-dir $(CURDIR)/$(LOCAL)/nodelet --client-ca-file $(LOCAL)/controlplane/pki/ca.crt --address $$address \
			--node-labels nodelet.io/sample=true $(RUN_FLAGS) > $(LOCAL)/nodelet.log 2>&1 & echo $$! > $(LOCAL)/nodelet.pid; \
	fi
	@for i in $$(seq 1 60); do $(KUBECTL) get node $(NODE_NAME) >/dev/null 2>&1 && break; sleep 1; done
	@if [ "$(PROVIDER)" != sim ]; then \
		if [ -f $(LOCAL)/addonsup.pid ] && kill -0 $$(cat $(LOCAL)/addonsup.pid) 2>/dev/null; then \
			echo "CoreDNS and kube-proxy already running"; \
		else \
			rm -f $(LOCAL)/addons-ready; \
			nohup bin/addonsup --kubeconfig $(LOCAL)/controlplane/admin.kubeconfig --bin bin --dir $(LOCAL)/addons \
				--node-name $(NODE_NAME) --ready-file $(LOCAL)/addons-ready $(ADDONS_FLAGS) > $(LOCAL)/addonsup.log 2>&1 & echo $$! > $(LOCAL)/addonsup.pid; \
		fi; \
		for i in $$(seq 1 120); do [ -s $(LOCAL)/addons-ready ] && break; kill -0 $$(cat $(LOCAL)/addonsup.pid) 2>/dev/null || break; sleep 1; done; \
		[ -s $(LOCAL)/addons-ready ] || { echo "CoreDNS and kube-proxy not ready; see $(LOCAL)/addonsup.log:"; tail -5 $(LOCAL)/addonsup.log; exit 1; }; \
	fi
	$(KUBECTL) wait --for=condition=Ready node/$(NODE_NAME) --timeout=60s
	$(KUBECTL) apply -f deploy/sample-deployment.yaml
	$(KUBECTL) rollout status deployment/sample --timeout=120s
	@echo
	@echo "nodelet node $(NODE_NAME) ($(PROVIDER) provider) is running the sample Deployment. Look at it with:"
	@echo "  $(KUBECTL) get nodes,pods -o wide"
	@echo "  $(KUBECTL) logs deployment/sample"
	@echo "  $(KUBECTL) top pods   (once metrics-server has scraped the node)"
	@if [ "$(PROVIDER)" != sim ]; then echo "Static pods: drop pod manifests into $(LOCAL)/manifests (read every 20s; each gets a mirror pod <name>-$(NODE_NAME))"; fi
	@if [ "$(PROVIDER)" != sim ]; then echo "Services: cluster DNS at 10.96.0.10 (CoreDNS) and kube-proxy; pods reach the API server at https://kubernetes.default.svc (see README, Quick start)"; fi
	@echo "Logs: $(LOCAL)/nodelet.log, $(LOCAL)/controlplane/logs/, $(LOCAL)/addons/. Stop with: make stop"

# addonsup removes kube-proxy's iptables rules and the kube-dns Service as
# it stops. With the cri provider, stopping containerd removes every pod,
# so the volume mounts the agent made for them are unmounted too (the next
# make run sets them up again); process pods outlive the agent and keep
# theirs.
stop:
	@cri=; [ -f $(LOCAL)/criup.pid ] && cri=1; \
	for p in nodelet addonsup criup controlplane; do \
		if [ -f $(LOCAL)/$$p.pid ]; then \
			pid=$$(cat $(LOCAL)/$$p.pid); kill $$pid 2>/dev/null || true; \
			for i in $$(seq 1 60); do kill -0 $$pid 2>/dev/null || break; sleep 0.5; done; \
			rm -f $(LOCAL)/$$p.pid; \
		fi; \
	done; \
	if [ -n "$$cri" ]; then \
		awk '$$5 ~ "^$(CURDIR)/$(LOCAL)/nodelet/pods/" {print $$5}' /proc/self/mountinfo | sort -r | xargs -r -n1 umount; \
	fi
	@for i in $$(seq 1 30); do [ -f $(LOCAL)/controlplane/ready ] || break; sleep 1; done

vet:
	$(GO) vet ./...
	$(GO) vet -tags karpenter ./test/e2e
	@unformatted=$$(gofmt -l cmd internal pkg test bench hack adapter examples 2>/dev/null); \
		if [ -n "$$unformatted" ]; then echo "gofmt needed: $$unformatted"; exit 1; fi

# NESTED: the modules of their own inside the repository that make test
# vets and tests too: the virtual-kubelet adapter and the example provider.
NESTED := adapter/virtualkubelet examples/podservice

# test: unit and end-to-end tests, then those of the NESTED modules; the
# e2e tests start their own control plane.
test: build vet
	@rm -f $(LOCAL)/reliability.md
	$(GO) test -timeout $(TEST_TIMEOUT) ./...
	@if [ -f $(LOCAL)/reliability.md ]; then echo; echo "RELIABILITY (test/chaos)"; cat $(LOCAL)/reliability.md; fi
	for m in $(NESTED); do (cd $$m && $(GO) vet ./... && $(GO) test -timeout $(TEST_TIMEOUT) ./...) || exit 1; done

unit:
	$(GO) test $$($(GO) list ./... | grep -v /test/e2e)

# fuzz: every fuzz target of the repository (func FuzzX in a _test.go file)
# for FUZZTIME each, one after the other on one core; the first failure
# stops it, its input in the package's testdata/fuzz. The seed corpora run
# with the unit tests already.
FUZZTIME ?= 5m
.PHONY: fuzz
fuzz:
	@set -e; for file in $$(grep -rl --include='*_test.go' '^func Fuzz' cmd internal pkg | sort); do \
		for target in $$(sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(.*/\1/p' $$file); do \
			echo "== $$target in ./$$(dirname $$file) for $(FUZZTIME)"; \
			$(GO) test -run '^$$' -fuzz "^$$target\$$" -fuzztime $(FUZZTIME) -parallel 1 ./$$(dirname $$file); \
		done; \
	done

e2e: build
	$(GO) test -timeout $(TEST_TIMEOUT) ./test/e2e/

# bench: nodelet against kwok on the local control plane (not part of test).
# Both scales, against the pinned kwok and the lighter v0.7.0, each at its
# defaults (nodeLeaseParallelism, nodePlayStageParallelism and
# podPlayStageParallelism 4) and tuned (-tuned: those raised to nodelet's
# worker counts at each scale), about 90 minutes; BENCH_ARGS picks one
# scale (--nodes N --pods M) or other agents (--agents).
KWOK_VERSION := v0.8.0
KWOK_VERSIONS := $(KWOK_VERSION) v0.7.0
BENCH_ARGS ?= --scales 1000/5000,5000/10000 --steady 5m --agents nodelet,kwok,kwok-tuned,kwok@v0.7.0,kwok@v0.7.0-tuned

# bin/kwok-VERSION: one kwok release, installed from the module proxy.
bin/kwok-%:
	tmp=$$(mktemp -d) && GOBIN=$$tmp $(GO) install sigs.k8s.io/kwok/cmd/kwok@$* && mv $$tmp/kwok $@ && rmdir $$tmp

# TestKwokAndNodeletPlayTheSameStages (test/e2e) runs the pinned kwok
# beside nodelet on the same stages.
test e2e: bin/kwok-$(KWOK_VERSION)

bench: build $(foreach v,$(KWOK_VERSIONS),bin/kwok-$(v))
	$(GO) run ./bench $(BENCH_ARGS) --out bench/results.json \
		--kwok-version $(KWOK_VERSION) --gomodcache $$($(GO) env GOMODCACHE)

# bench-kwok-stages: issue 28's run: nodelet taking over the Nodes the
# bench creates (nodelet-takeover: kwok's annotation selector, no nodes of
# its own) against kwok at its defaults and tuned, each managing 5,000
# pre-created Nodes with 10,000 pods on a fresh control plane, all three
# with kwokctl's fast stages and then with kwok's general pod stages
# (about 40 minutes; not part of test). KWOK_STAGES_ARGS changes the run; an
# --out in it replaces bench/results-kwok-stages.json.
KWOK_STAGES_ARGS ?= --nodes 5000 --pods 10000 --steady 2m --agents nodelet-takeover,kwok,kwok-tuned --kwok-stages fast,general
.PHONY: bench-kwok-stages
bench-kwok-stages: build bin/kwok-$(KWOK_VERSION)
	$(GO) run ./bench --out bench/results-kwok-stages.json --kwok-version $(KWOK_VERSION) \
		--gomodcache $$($(GO) env GOMODCACHE) $(KWOK_STAGES_ARGS)

# bench-scaling: what a node and a pod cost nodelet, kwok and tuned kwok in
# RSS and CPU: each agent at 1,000 / 2,000, 2,500 / 5,000 and 5,000 / 10,000
# nodes / pods (the floor and the cost of a node with its 2 pods) and at
# 1,000 / 10,000 (which separates a node's cost from a pod's), each run on a
# fresh control plane and measured for 90 s with every pod Running; least
# squares per agent, nodelet against kwok's best (about 40 minutes).
SCALING_ARGS ?= --scaling --scaling-scales 1000/2000,2500/5000,5000/10000,1000/10000 --scaling-window 90s --agents nodelet,kwok,kwok-tuned
.PHONY: bench-scaling
bench-scaling: build bin/kwok-$(KWOK_VERSION)
	$(GO) run ./bench $(SCALING_ARGS) --out bench/results-scaling.json \
		--kwok-version $(KWOK_VERSION) --gomodcache $$($(GO) env GOMODCACHE)

# bench-process: the process provider, 100 pods of a Deployment (needs root).
bench-process: build
	$(GO) run ./bench --process-pods 100 --out bench/results-process.json

# bench-cri: nodelet's cri provider against the real kubelet (bin/controlplane
# kubelet), at its default client limit (50 QPS / 100 burst) and at
# nodelet's (kubelet-matched: 5,000 / 10,000), one after the other on one
# private containerd, 100 pods of a Deployment each (needs root).
.PHONY: bench-cri
bench-cri: build bin/containerd bin/containerd-shim-runc-v2 cri-deps images
	$(GO) run ./bench --cri-pods 100 --cri-agents kubelet,kubelet-matched,nodelet --out bench/results-cri.json

# soak: one sim agent's nodes and pods under a steady churn of pods created
# and deleted, the agent's RSS, heap and goroutines, lease lapses and API
# writes sampled every minute, judged at the end: RSS after the half-way
# mark within 5% of the mark's, 0 lease lapses, writes/node/min within the
# steady-state budget (about 70 minutes; not part of test).
SOAK_ARGS ?= --soak 60m --nodes 5000 --pods 10000 --churn 10
.PHONY: soak
soak: build
	$(GO) run ./bench $(SOAK_ARGS) --out bench/results-soak.json

# clean: end everything make run started and remove bin/ and .local/, from
# whatever state make run or make stop left. While the control plane and
# the agent run, the sample is deleted first, its pods stopped gracefully.
# Then hack/teardown stops the agent, CoreDNS and kube-proxy, containerd
# and the control plane (by their pid files), removes the process
# provider's sandboxes (which outlive the agent by design), ends every
# other process that runs from .local/ or from criup's containerd
# directory, removes the iptables rules of a kube-proxy whose addonsup was
# killed, unmounts what is mounted below them and removes them without
# ever descending into a mount.
clean:
	-@if [ -f $(LOCAL)/controlplane/ready ] && [ -f $(LOCAL)/nodelet.pid ] && kill -0 $$(cat $(LOCAL)/nodelet.pid) 2>/dev/null; then \
		$(KUBECTL) delete deployment sample --ignore-not-found --wait=true --timeout=60s && \
		$(KUBECTL) wait --for=delete pod -l app=sample --timeout=60s 2>/dev/null; \
	fi; true
	$(GO) run ./hack/teardown --dir $(LOCAL) --process-root $(LOCAL)/nodelet --cri-dir-file $(LOCAL)/cri-dir --addons-dir $(LOCAL)/addons
	rm -rf bin
