# mptun — multipath DCCP tunnel. `make help` lists the targets.
export PATH := /usr/local/go/bin:$(PATH)
GO        ?= go
BIN       ?= bin
FUZZTIME  ?= 20s
SCENARIO  ?= configs/lab/demo.toml
PKGS      := ./...

.PHONY: all build deps test test-short test-race vet lint demo bench fuzz install clean help release deb

all: build

help:
	@echo "make build      build bin/mptund, bin/mptun and bin/mptun-lab (the lab and benchmarks)"
	@echo "make test       lint + all tests (root runs the namespace end-to-end tests too) + race tests of the core"
	@echo "make lint       gofmt, go vet and staticcheck"
	@echo "make test-race  go test -race on the core packages"
	@echo "make demo       run the demo scenario on the built-in lab (root)"
	@echo "make bench      Go benchmarks of the protocol core and data path"
	@echo "make fuzz       run every fuzz target for FUZZTIME each (default $(FUZZTIME))"
	@echo "make release    stripped static mptund and mptun for linux amd64, arm64, arm (v7), mipsle (softfloat) in dist/"
	@echo "make deb        Debian packages mptun and mptun-lab for $(DEB_ARCHES) in dist/ (VERSION=... to set one)"

build:
	@mkdir -p $(BIN)
	CGO_ENABLED=0 $(GO) build -trimpath -o $(BIN)/ ./cmd/...

vet:
	$(GO) vet $(PKGS)

# staticcheck is fetched through the Go module proxy at this version.
STATICCHECK ?= $(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2

lint: vet
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt -l:"; echo "$$out"; exit 1; fi
	$(STATICCHECK) $(PKGS)

# The sans-I/O core and its helpers under the race detector; -short skips
# the long single-goroutine evaluations, which the plain run covers.
RACE_PKGS := ./mpdccp/... ./ccid/... ./scheduler/... ./reorder/... ./internal/... ./control/... ./config/...

test-race:
	$(GO) test -race -short -count=1 -timeout 20m $(RACE_PKGS)

deps:
	scripts/deps.sh

# Packages run one at a time (-p 1): the namespace tests measure throughput
# and must not share the two cores with another package's simulations.
# Tests' artifacts (e.g. the status page's screenshot) are kept in
# $(ARTIFACTS)/_artifacts/; each test logs where its own went.
ARTIFACTS ?= out/test
test: build lint
	@mkdir -p $(ARTIFACTS)
	$(GO) test -p 1 -count=1 -timeout 30m -artifacts -outputdir=$(abspath $(ARTIFACTS)) $(PKGS)
	$(MAKE) test-race

test-short:
	$(GO) test -short -count=1 $(PKGS)

demo: deps build
	./$(BIN)/mptun lab run $(SCENARIO) --out lab-out/demo

bench:
	$(GO) test -run='^$$' -bench=. -benchmem ./mpdccp/... ./ccid/... ./scheduler/... ./reorder/... ./netio/...

# Runs each Go fuzz target found in the tree for FUZZTIME.
fuzz:
	@set -e; for f in $$(grep -rl --include='*_test.go' '^func Fuzz' .); do \
		dir=$$(dirname $$f); \
		for t in $$(grep -o '^func Fuzz[A-Za-z0-9_]*' $$f | sed 's/func //'); do \
			echo "== $$dir $$t"; \
			$(GO) test -run='^$$' -fuzz="^$$t$$" -fuzztime=$(FUZZTIME) $$dir; \
		done; \
	done

# Debian packages built with nfpm (pinned in packaging/tools/go.mod);
# scripts/deb.sh prints their sizes. VERSION defaults to the git tag or
# 0.0~gitTIMESTAMP.SHA.
DEB_ARCHES ?= amd64 arm64

deb:
	scripts/deb.sh $(DEB_ARCHES)

install: build
	install -m 0755 $(BIN)/mptund $(BIN)/mptun $(BIN)/mptun-lab /usr/local/bin/
	install -d /etc/mptun
	install -m 0644 systemd/mptund@.service /etc/systemd/system/

# Cross-compiled, stripped, static binaries for CPE hardware; prints their
# sizes and fails if mptund for arm64 is over 10 MB.
release:
	GO=$(GO) scripts/release.sh dist

clean:
	rm -rf $(BIN) lab-out dist
