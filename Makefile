# Tideway developer entry points. The two a newcomer needs:
#   make demo   run the demo
#   make test   install what the tests need, then run every check and test
SHELL := /bin/bash
CARGO ?= cargo
export CARGO_TERM_COLOR ?= never
# Where cargo builds (CI keeps it outside the clone, so dependencies stay built between runs).
TARGET_DIR := $(or $(CARGO_TARGET_DIR),target)

.PHONY: demo test deps lint purity generated check-generated unit check-rbac test-helm test-scale test-api test-ipvs bench bench-dns bench-node-dns bench-lab bench-peers bench-churn fuzz-dns build release kube peers image release-images test-image

demo: build
	./scripts/demo.sh

build:
	$(CARGO) build -p tideway

deps:
	./scripts/install-deps.sh

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets --locked -- -D warnings

purity:
	./scripts/check-purity.sh
	python3 ./scripts/check-cycles.py

# Regenerate committed artifacts (CRDs, golden rulesets, rendered chart snapshots).
generated: build
	$(TARGET_DIR)/debug/tideway crdgen --dir helm/tideway/crds
	UPDATE_GOLDEN=1 $(CARGO) test -p tideway-tests --test golden --test frr
	UPDATE_SNAPSHOTS=1 ./scripts/test-helm.sh
	./scripts/gen-runtime-defaults.sh

check-generated: build
	d=$$(mktemp -d) && $(TARGET_DIR)/debug/tideway crdgen --dir $$d && diff -ru helm/tideway/crds $$d; s=$$?; rm -rf $$d; exit $$s
	./scripts/gen-runtime-defaults.sh --check

# The lab's Kubernetes control plane (etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler, kube-proxy, kubeadm) as one binary, target/kube/tideway-kube, built from kube/
# into a cache outside the clone (a cache hit takes a second); see kube/README.md.
kube:
	./scripts/build-kube.sh

# The peers, from their own Go modules at pinned versions (peers/): kube-proxy (the control
# plane's), CoreDNS through its coremain, MetalLB's controller and speaker, in target/peers/,
# cached outside the clone like the control plane; prints their versions. Their images too
# (target/peers/images/, for `lab up --kube --peers`), and MetalLB's manifest.
peers:
	./scripts/build-peers.sh

# Tideway's OCI image from Debian's packages and the release binary, without a registry or an
# engine: target/image/tideway-VERSION.oci.tar and its SBOM (image/ holds the recipe).
image:
	./scripts/build-image.sh

# The previous release's image and chart (target/releases/v0.1.0/), for the chart's upgrade
# test: built from its commit once and cached outside the clone by commit.
release-images:
	./scripts/build-release-image.sh v0.1.0

# The image built twice (same bytes), read by skopeo, loaded and run by podman, imported by
# containerd as `kind load` does, its SBOM checked against its layer.
test-image: image
	./scripts/test-image.sh

# The Helm chart: lint, strict schema validation of every rendered object, RBAC, snapshots.
test-helm:
	./scripts/test-helm.sh

# Every test runs, or fails saying what it needs; none passes by skipping. Two sets are left out
# by name, never by the tests themselves: the IPVS tests (this kernel has no IPVS; `test-ipvs`
# runs them in a VM) and, only when asked with TIDEWAY_SKIP_PRIVILEGED=1, the tests that need
# root (network namespaces, kernel rules); nextest's closing line counts what was left out.
NOT_ON_THIS_KERNEL := (binary(dataplane) or binary(lab)) and test(/ipvs/)
PRIVILEGED := binary(dataplane) or binary(maglev_dataplane) or binary(lab) or binary(lab_bgp) or binary(announcer) \
	or binary(nft_netlink) or binary(control_plane) or binary(crd_admission) or binary(migrate_cluster) or binary(watches) or binary(reviews) or binary(server_side_apply) or binary(api_faults) or binary(fencing) or binary(external_ips) or binary(throttled) or binary(operator_api) or binary(source_api) or binary(kubernetes_api) or binary(failover) or binary(lab_kube) or binary(dns_peers) or binary(proxy_peers) or binary(extra_kind) or binary(node_local_dns) \
	or binary(glibc) or (binary(kubernetes) and test(/^agent_/)) or (binary(dns_hostile) and test(/flood/))
RBAC_USAGE := $(CURDIR)/target/rbac-usage
# The kube lab's tests use kubectl: the machine's, else the one test-helm installs.
export KUBECTL ?= $(or $(shell command -v kubectl 2>/dev/null),$(HOME)/.cache/tideway/tools/kubectl)
unit:
	@rm -rf $(RBAC_USAGE); rc=0; TIDEWAY_RBAC_USAGE=$(RBAC_USAGE) $(CARGO) nextest run --workspace --locked --no-fail-fast \
		-E 'not ($(NOT_ON_THIS_KERNEL))$(if $(filter 1,$(TIDEWAY_SKIP_PRIVILEGED)), and not ($(PRIVILEGED)),)' || rc=$$?; \
	$(if $(filter 1,$(TIDEWAY_SKIP_PRIVILEGED)),n=$$($(CARGO) nextest list --workspace --locked --message-format oneline \
		-E '($(PRIVILEGED)) and not ($(NOT_ON_THIS_KERNEL))' 2>/dev/null | wc -l); \
	echo "TIDEWAY_SKIP_PRIVILEGED=1: $$n privileged tests were left out (not run)";,) \
	[ ! -f target/nextest/default/junit.xml ] || ./scripts/slowest-tests.py target/nextest/default/junit.xml; exit $$rc

# Least privilege: each grant of the chart's RBAC is used by a request some test made on the
# lab's real API server in `unit` (its audit logs, recorded in target/rbac-usage), or is named
# with its reason in helm/tideway/tests/rbac-outside-tests.txt, which cannot grow quietly (a
# line without a reason, or naming a used grant, fails). Prints every grant, used or not.
check-rbac:
	$(CARGO) run -q --locked -p tideway-tests --bin rbac-usage -- $(RBAC_USAGE)

# 100,000 Services render the recorded rules (the debug build in `unit` checks 10,000).
test-scale:
	$(CARGO) test --release --locked -p tideway-core --test scale

# The REST APIs of a running lab against their OpenAPI documents (schemathesis; root).
test-api: build
	./scripts/test-api.sh

# The IPVS battery, in a VM (the host kernel has no IPVS); the rest of the dataplane battery
# runs on the host in `unit`.
test-ipvs:
	./scripts/test-ipvs.sh

# Benchmarks (print figures; docs/benchmarks.md records them).
bench:
	$(CARGO) bench -p tideway-core --bench planner
	TIDEWAY_IPTABLES_BACKEND=legacy $(CARGO) bench -p tideway --bench agent

# The lab: up to first curl, L2 failover, network programming latency, BGP through the lab's router (root; MODE=iptables too).
bench-lab:
	$(CARGO) bench -p tideway --bench lab

# The peers side by side in one run: MetalLB's layer-2 failover against Tideway's in a kube lab
# (Tideway from its image), kube-proxy against the agent (nftables and iptables: full sync at
# 1,000 and 10,000 Services, at rest, network programming, an endpoint change) and CoreDNS
# against `tideway dns` (root; installs dnsperf and dig; about 80 minutes).
bench-peers: kube peers image
	command -v dnsperf >/dev/null && command -v dig >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends dnsperf dnsutils; }
	$(CARGO) bench -p tideway --bench peers

# Churn: the agent, the DNS server and the operator while endpoints change at 10, 100 and
# 1,000 a second, at 10,000 and 100,000 Services, one point again on the real API server, and
# the first view of 100,000 Services from it (root; about 15 minutes, 3 more the first time:
# it writes that cluster into etcd once and keeps a snapshot under the target directory).
# FLOOD=N: each rate again with N random-name queries a second at the agent's node-local DNS.
bench-churn: kube
	command -v dnsperf >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends dnsperf; }
	$(CARGO) bench -p tideway --bench churn

# DNS against Knot on the same zone (installs dnsperf and knot; about 10 minutes).
bench-dns:
	./bench/dns/run.sh

# Node-local DNS: a pod's lookup latency and conntrack entries through its node's listener and
# through the DNS Service, the agent's RSS with the listener, answers per CPU-second.
bench-node-dns:
	./bench/node-dns/run.sh

# Fuzz the DNS query path for 60 s (installs cargo-fuzz; nightly adds AddressSanitizer).
fuzz-dns:
	./dns/fuzz/run.sh 60

# `image` comes before `unit`: the kube lab's test runs Pods from it.
test: deps lint purity check-generated test-helm kube peers release-images image unit check-rbac test-scale test-image test-api test-ipvs
