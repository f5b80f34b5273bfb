# Esparto — the two commands of the quick start, and a few helpers.
#
#   make demo   two gateways in network namespaces, traffic through the tunnel, live figures
#   make test   every test: unit, property, netns (root), strongSwan interop, fuzz smoke runs
#   make fuzz   longer fuzz runs (docs/FUZZING.md)
#
# Both install what they need first (scripts/setup.sh). `make build` builds the
# gateway (target/release/esparto) and the test bed that runs it
# (target/release/esparto-testbed: the demo and the end-to-end benchmarks).
#
# Installing the gateway (the test bed stays out):
#
#   make esparto man                              build the gateway and its manual pages (as yourself)
#   sudo make install [PREFIX=/usr/local] [DESTDIR=]  install what they built: binary, systemd units,
#                                                 configuration, man pages, docs (it builds nothing)
#   make uninstall [PREFIX=…]                     all of that but /etc/esparto/esparto.toml
#   make deb                                      target/debian/esparto_*.deb, built with cargo-deb
#   make deb-check                                that package installed, started, reloaded, stopped and
#                                                 purged in a booted Debian 12 container (packaging/check-deb.sh)
#
# `make install` and `make deb` need only Rust and a C compiler, not
# scripts/setup.sh. What each installs where: docs/SERVICE.md.

SHELL := /bin/bash
# Where rustup puts cargo; scripts/setup.sh installs Rust there if there is none.
export PATH := $(HOME)/.cargo/bin:$(PATH)
CARGO ?= cargo
export CARGO_TERM_COLOR ?= never

.PHONY: all setup build demo test lint fuzz fuzz-all fuzz-seeds bench clean esparto man install uninstall deb deb-check

PREFIX ?= /usr/local
SBINDIR ?= $(PREFIX)/sbin
MANDIR ?= $(PREFIX)/share/man
DOCDIR ?= $(PREFIX)/share/doc/esparto
# The operator's documents, installed in the source's layout (as the
# Debian package does: crates/esparto/Cargo.toml, assets).
INSTALLED_DOCS = CONFIG.md SERVICE.md OPERATIONS.md METRICS.md PLANNING.md BENCHMARKS.md
# systemd reads units from /usr/local/lib/systemd/system and /usr/lib/systemd/system.
UNITDIR ?= $(PREFIX)/lib/systemd/system
SYSCONFDIR ?= /etc
INSTALL ?= install

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

# The gateway alone, and its manual pages (generated from its clap definition).
esparto:
	$(CARGO) build --release -p esparto

man:
	$(CARGO) run --release --quiet -p esparto-man -- target/release/man

# Installs what `make esparto man` built and builds nothing itself: run
# with sudo, a build would leave root's files in target/ and root's
# toolchain in charge.
install:
	@if [ ! -x target/release/esparto ] || ! ls target/release/man/*.8 >/dev/null 2>&1; then \
	    echo "make install: nothing built to install: run 'make esparto man' first (as yourself), then 'sudo make install'" >&2; \
	    exit 1; \
	fi
	@echo "installing target/release/esparto ($$(target/release/esparto --version)) and its manual pages"
	$(INSTALL) -D -m 0755 target/release/esparto $(DESTDIR)$(SBINDIR)/esparto
	$(INSTALL) -d $(DESTDIR)$(MANDIR)/man8
	$(INSTALL) -m 0644 target/release/man/*.8 $(DESTDIR)$(MANDIR)/man8/
	$(INSTALL) -d $(DESTDIR)$(UNITDIR)
	sed -e 's|/usr/sbin/esparto|$(SBINDIR)/esparto|' -e 's|/etc/esparto/|$(SYSCONFDIR)/esparto/|' \
	    packaging/esparto.service > $(DESTDIR)$(UNITDIR)/esparto.service
	sed -e 's|/usr/sbin/esparto|$(SBINDIR)/esparto|' \
	    packaging/esparto@.service > $(DESTDIR)$(UNITDIR)/esparto@.service
	chmod 0644 $(DESTDIR)$(UNITDIR)/esparto.service $(DESTDIR)$(UNITDIR)/esparto@.service
	$(INSTALL) -d -m 0755 $(DESTDIR)$(SYSCONFDIR)/esparto
	@if [ -e $(DESTDIR)$(SYSCONFDIR)/esparto/esparto.toml ]; then \
	    echo "keeping $(DESTDIR)$(SYSCONFDIR)/esparto/esparto.toml (the example is $(DESTDIR)$(DOCDIR)/esparto.toml)"; \
	else \
	    $(INSTALL) -m 0600 packaging/esparto.toml $(DESTDIR)$(SYSCONFDIR)/esparto/esparto.toml; \
	fi
	$(INSTALL) -d $(DESTDIR)$(DOCDIR)/examples $(DESTDIR)$(DOCDIR)/docs/img
	$(INSTALL) -m 0644 README.md packaging/esparto.toml $(DESTDIR)$(DOCDIR)/
	$(INSTALL) -m 0644 $(addprefix docs/,$(INSTALLED_DOCS)) $(DESTDIR)$(DOCDIR)/docs/
	$(INSTALL) -m 0644 docs/img/*.svg $(DESTDIR)$(DOCDIR)/docs/img/
	$(INSTALL) -m 0644 examples/*.toml examples/*.json $(DESTDIR)$(DOCDIR)/examples/
	@echo "installed; next: systemctl daemon-reload, connections into $(SYSCONFDIR)/esparto/esparto.toml, systemctl enable --now esparto"

uninstall:
	rm -f $(DESTDIR)$(SBINDIR)/esparto $(DESTDIR)$(UNITDIR)/esparto.service $(DESTDIR)$(UNITDIR)/esparto@.service
	rm -f $(DESTDIR)$(MANDIR)/man8/esparto.8 $(DESTDIR)$(MANDIR)/man8/esparto-*.8
	rm -rf $(DESTDIR)$(DOCDIR)
	@echo "kept $(DESTDIR)$(SYSCONFDIR)/esparto/esparto.toml and /var/lib/esparto (remove them by hand if unwanted)"

# A Debian package with cargo-deb (installed here on first use; scripts/setup.sh
# does not install it, as nothing else needs it). Metadata: crates/esparto/Cargo.toml.
# The binary is stripped (the release profile keeps line tables for
# backtraces; a panic's log line names its source location either way), the
# manual pages gzipped, as Debian's policy asks.
deb: man
	@$(CARGO) deb --version >/dev/null 2>&1 || $(CARGO) install cargo-deb --locked
	gzip -9nkf target/release/man/*.8
	$(CARGO) deb -p esparto --strip

deb-check: deb
	@scripts/setup.sh package
	packaging/check-deb.sh "$$(ls -t target/debian/esparto_*.deb | head -n 1)"

clean:
	$(CARGO) clean
