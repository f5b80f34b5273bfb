# Esparto — the two commands of the quick start, and a few helpers.
#
#   make demo   two gateways in network namespaces, traffic through the tunnel, live figures
#   make test   every test: unit, property, netns (root), strongSwan interop, fuzz smoke runs
#   make fuzz   longer fuzz runs (docs/FUZZING.md)
#
# Both install what they need first (scripts/setup.sh). `make build` builds the
# gateway (target/release/esparto) and the test bed that runs it
# (target/release/esparto-testbed: the demo and the end-to-end benchmarks).

SHELL := /bin/bash
CARGO ?= cargo
export CARGO_TERM_COLOR ?= never

.PHONY: all setup build demo test lint fuzz fuzz-all fuzz-seeds bench clean

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

# Fuzzing (docs/FUZZING.md), niced, from the seeds in fuzz/seeds/:
#   make fuzz TARGET=esp_decapsulate SECONDS=600   one target
#   make fuzz-all SECONDS=600                      every target in turn, with a summary
#   make fuzz-seeds                                write fuzz/seeds/ again
fuzz: setup
	@test -n "$(TARGET)" || { echo "make fuzz TARGET=… (one of: $$(cd fuzz && $(CARGO) +nightly fuzz list | tr '\n' ' '))"; exit 2; }
	scripts/fuzz.sh $(or $(SECONDS),60) $(TARGET)

fuzz-all: setup
	scripts/fuzz.sh $(or $(SECONDS),60) all

fuzz-seeds:
	$(CARGO) run -p esparto --example fuzz_seeds

bench: build
	target/release/esparto bench dataplane

clean:
	$(CARGO) clean
