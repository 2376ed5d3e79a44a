# Tideway developer entry points. The two a newcomer needs:
#   make demo   run the demo
#   make test   install what the tests need, then run every check and test
SHELL := /bin/bash
CARGO ?= cargo
export CARGO_TERM_COLOR ?= never

.PHONY: demo test deps lint purity generated check-generated unit test-ipvs bench bench-dns fuzz-dns build release

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

# Regenerate committed artifacts (CRDs, golden rulesets).
generated: build
	./target/debug/tideway crdgen > helm/crds/proxyconfigs.tideway.io.yaml
	UPDATE_GOLDEN=1 $(CARGO) test -p tideway-tests --test golden

check-generated: build
	diff -u helm/crds/proxyconfigs.tideway.io.yaml <(./target/debug/tideway crdgen)

# The IPVS half of the dataplane battery needs a kernel with IPVS: `test-ipvs` runs it.
unit:
	@if $(CARGO) nextest --version >/dev/null 2>&1; then \
		$(CARGO) nextest run --workspace --locked --no-fail-fast \
			-E 'not (binary(dataplane) and test(/ipvs/))'; \
	else \
		$(CARGO) test --workspace --locked --no-fail-fast; \
	fi

# The IPVS battery, in a VM (the host kernel has no IPVS); the rest of the dataplane battery
# runs on the host in `unit`.
test-ipvs:
	./scripts/test-ipvs.sh

# Benchmarks (print figures; docs/benchmarks.md records them).
bench:
	$(CARGO) bench -p tideway-core --bench planner
	TIDEWAY_IPTABLES_BACKEND=legacy $(CARGO) bench -p tideway --bench agent

# DNS against Knot on the same zone (installs dnsperf and knot; about 10 minutes).
bench-dns:
	./bench/dns/run.sh

# Fuzz the DNS query path for 60 s (installs cargo-fuzz; nightly adds AddressSanitizer).
fuzz-dns:
	./dns/fuzz/run.sh 60

test: deps lint purity check-generated unit test-ipvs
