# adstap — the targets a newcomer needs: make demo, make test.
GO       ?= go
VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT   ?= $(shell git rev-parse --short=12 HEAD 2>/dev/null)
LDFLAGS  := -s -w -X main.version=$(VERSION) -X main.commit=$(COMMIT)
PKGS     := ./...

.PHONY: build test lint fmt vet fuzz-short demo clean

# A control plane and two xDS clients talking through a real tap on loopback;
# the live log shows pushes, ACKs, NACKs, a NACK storm and recovery. Ctrl-C stops.
demo:
	$(GO) run ./cmd/adstap demo

build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/adstap ./cmd/adstap

# The test command of the README and of CI: every package with the race
# detector and goroutine-leak checks, plus lint.
test: lint
	$(GO) test -race -count=1 -timeout 15m $(PKGS)
	$(MAKE) fuzz-short

# A short run of the envelope decoder's fuzz target on top of its checked-in corpus.
fuzz-short:
	$(GO) test -run '^$$' -fuzz '^FuzzDecode$$' -fuzztime 20s -fuzzminimizetime 2s ./codec/

lint: vet
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet $(PKGS)

fmt:
	gofmt -w $$(git ls-files '*.go')

clean:
	rm -rf bin
