# Esparto — the two commands of the quick start, and a few helpers.
#
#   make demo   two gateways in network namespaces, traffic through the tunnel, live figures
#   make test   every test: unit, property, netns (root), strongSwan interop, fuzz smoke runs
#
# Both install what they need first (scripts/setup.sh). `make build` builds the
# gateway (target/release/esparto) and the test bed that runs it
# (target/release/esparto-testbed: the demo and the end-to-end benchmarks).

SHELL := /bin/bash
CARGO ?= cargo
export CARGO_TERM_COLOR ?= never

.PHONY: all setup build demo test lint fuzz bench clean

all: build

setup:
	@scripts/setup.sh

build: setup
	$(CARGO) build --release -p esparto -p esparto-testbed

demo: build
	target/release/esparto-testbed demo

test: setup
	scripts/test.sh

lint:
	$(CARGO) clippy --workspace --all-targets -- -D warnings

# Run one fuzz target for a while: make fuzz TARGET=esp_decapsulate SECONDS=600
fuzz: setup
	cd fuzz && $(CARGO) +nightly fuzz run $(TARGET) -- -max_total_time=$(or $(SECONDS),60)

bench: build
	target/release/esparto bench dataplane

clean:
	$(CARGO) clean
