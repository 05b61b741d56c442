# mptun — multipath DCCP tunnel. `make help` lists the targets.
export PATH := /usr/local/go/bin:$(PATH)
GO        ?= go
BIN       ?= bin
FUZZTIME  ?= 20s
SCENARIO  ?= configs/lab/demo.toml
PKGS      := ./...

.PHONY: all build deps test test-short vet demo bench fuzz install clean help

all: build

help:
	@echo "make build      build bin/mptund, bin/mptun and bin/mptun-lab (the lab and benchmarks)"
	@echo "make test       vet + all tests (root runs the namespace end-to-end tests too)"
	@echo "make demo       run the demo scenario on the built-in lab (root)"
	@echo "make bench      Go benchmarks of the protocol core and data path"
	@echo "make fuzz       run every fuzz target for FUZZTIME each (default $(FUZZTIME))"

build:
	@mkdir -p $(BIN)
	$(GO) build -trimpath -o $(BIN)/ ./cmd/...

vet:
	$(GO) vet $(PKGS)

deps:
	scripts/deps.sh

# Packages run one at a time (-p 1): the namespace tests measure throughput
# and must not share the two cores with another package's simulations.
test: build vet
	$(GO) test -p 1 -count=1 -timeout 30m $(PKGS)

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

install: build
	install -m 0755 $(BIN)/mptund $(BIN)/mptun $(BIN)/mptun-lab /usr/local/bin/
	install -d /etc/mptun
	install -m 0644 systemd/mptund@.service /etc/systemd/system/

clean:
	rm -rf $(BIN) lab-out
