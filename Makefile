# adstap — the targets a newcomer needs: make demo, make test.
GO       ?= go
VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT   ?= $(shell git rev-parse --short=12 HEAD 2>/dev/null)
LDFLAGS  := -s -w -X main.version=$(VERSION) -X main.commit=$(COMMIT)
PKGS     := ./...

.PHONY: build test test-istio lint fmt vet staticcheck fuzz-short demo clean jaeger-bin jaeger rules chromium dashboard prometheus

# A control plane and two xDS clients talking through a real tap on loopback;
# the live log shows pushes, ACKs, NACKs, a NACK storm and recovery. Ctrl-C stops.
# The demo tag builds the demo in; the shipped binary (make build) leaves it,
# its control plane and its xDS clients out. Built, then run in make's place
# (exec), so that Ctrl-C ends make with the demo's own exit status, 0 after a
# clean drain (go run would end with 1 whatever the demo did).
demo:
	$(GO) build -tags demo -o .cache/bin/adstap-demo ./cmd/adstap
	exec .cache/bin/adstap-demo demo

build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/adstap ./cmd/adstap

# The container image of the Dockerfile: the same static build as `build`, on
# distroless as the nonroot user (65532). Needs Docker with BuildKit (23+);
# DOCKER picks another client (podman). Push it yourself: docker push $(IMAGE).
DOCKER     ?= docker
IMAGE_REPO ?= ghcr.io/adstap/adstap
IMAGE      ?= $(IMAGE_REPO):$(VERSION)
.PHONY: image
image:
	$(DOCKER) build --build-arg VERSION=$(VERSION) --build-arg COMMIT=$(COMMIT) -t $(IMAGE) -f Dockerfile .

# The test command of the README and of CI: every package with the race
# detector and goroutine-leak checks, plus lint, the alert rules and the
# Grafana dashboard. The demo tag includes the demo's test.
test: lint rules dashboard jaeger-bin chromium prometheus
	$(GO) test -race -count=1 -timeout 15m -tags demo $(PKGS)
	$(MAKE) fuzz-short

# Debian's chromium, for the live page's test in a real headless browser:
# installed when missing and apt-get can run; otherwise that test is skipped
# (and fails in CI).
chromium:
	@bash scripts/ensure-chromium.sh

# Debian's prometheus, for the mesh suite (test/mesh): a real Prometheus
# server scraping many taps for adstap status --prometheus. Installed when
# missing and apt-get can run; otherwise the suite is skipped (and fails in
# CI).
prometheus:
	@bash scripts/ensure-prometheus.sh

# The Grafana dashboard (deploy/grafana/dashboard.json): deploy/grafana, a
# module of its own so that Prometheus's parser and its dependencies stay out
# of adstap's, checks that the file is what its generator writes, that it is a
# valid dashboard, and that every query parses and names only series a real
# scrape of a running tap has. DASHBOARD_UPDATE=1 rewrites the file.
dashboard:
	cd deploy/grafana && $(GO) vet ./... && $(GO) test -race -count=1 ./...

# The Istio compatibility suite (istio/, its own Go module pinned to one
# istio.io/istio): Istio's real injector, istiod's xDS engine, istio-agent and
# istio's ADS clients around adstap (docs/istio.md). Istio's tree is large: the
# first race build takes about 4 minutes on 2 idle cores (16 on busy ones), then
# it is cached.
ISTIO_TEST_FLAGS ?=
test-istio:
	cd istio && bash ../scripts/heartbeat.sh test-istio $(GO) test -race -count=1 -timeout 60m $(ISTIO_TEST_FLAGS) ./...

# Jaeger v2 (all-in-one, memory storage) for the tests that check spans in a
# real Jaeger (internal/testutil/jaegertest) and for looking at spans by hand: built
# once from the Go module proxy into .cache/bin/jaeger (git-ignored), a few
# minutes the first time, then cached. Go's build says nothing for minutes,
# so a line every 30s shows it is still going.
jaeger-bin:
	@( n=0; while sleep 1 </dev/null >/dev/null 2>&1; do n=$$((n+1)); [ $$((n % 30)) -ne 0 ] || echo "jaeger-bin: still building Jaeger ($${n}s)..."; done ) & beat=$$!; \
	bash scripts/build-jaeger.sh; rc=$$?; kill $$beat 2>/dev/null; \
	if [ $$rc -ne 0 ]; then echo "jaeger-bin: building Jaeger failed (exit $$rc, output above); the span tests need .cache/bin/jaeger" >&2; exit $$rc; fi

# Jaeger on its standard ports, loopback only, in the foreground; Ctrl-C stops
# it. Its query service does not trace itself: it would send to its own 4317,
# showing a "jaeger" service and slowing Ctrl-C down by 10s.
# The module proxy's Jaeger source has no UI assets, so the page at :16686 is
# Jaeger's placeholder; its query API works, and JAEGER_FLAGS can point it at
# a built jaeger-ui: --set=extensions.jaeger_query.ui.assets_path=DIR.
JAEGER_FLAGS ?=
jaeger: jaeger-bin
	@echo "Jaeger query API (and UI page): http://127.0.0.1:16686  e.g. curl 'http://127.0.0.1:16686/api/traces?service=adstap'"
	@echo "OTLP: 127.0.0.1:4317 (gRPC), 127.0.0.1:4318 (HTTP)"
	@echo "Send the demo's spans to it, from another terminal:"
	@echo "  OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4317 make demo"
	JAEGER_LISTEN_HOST=127.0.0.1 .cache/bin/jaeger \
		--set=extensions.jaeger_query.enable_tracing=false \
		--set=extensions.jaeger_query.http.endpoint=127.0.0.1:16686 \
		--set=extensions.jaeger_query.grpc.endpoint=127.0.0.1:16685 $(JAEGER_FLAGS)

# The long form of the fault and load suite (test/reliability,
# docs/reliability.md): 100,000 messages over 200 streams with random
# disconnects, 500 MiB to a client that stops reading, a 60 s NACK loop, 60 s
# collector outages, a 1,000-stream reconnect herd, five upstream kills. Its
# short form runs in make test. Every measurement is a FIGURE line in the
# output and a JSON line in $(SOAK_FIGURES).
SOAK_FIGURES ?= .cache/soak-figures.jsonl
.PHONY: soak
soak: jaeger-bin
	@mkdir -p $(dir $(SOAK_FIGURES))
	ADSTAP_SOAK=1 ADSTAP_FIGURES=$(abspath $(SOAK_FIGURES)) $(GO) test -race -count=1 -timeout 60m -v ./test/reliability/

# Performance (docs/performance.md): each workload over five paths —
# direct, a pass-through relay, adstap as `adstap run` ships (its default
# flags), the same with every optional output off, and a typed relay that
# re-marshals every message as istio-agent does — alternated in one run; W7, the sidecar's footprint, over
# the relay and the adstap binary itself with the injection template's flags
# (built here too). Medians, the targets, and the machine go to stdout and
# into docs/performance.md (between its markers). About 8 minutes on 2 cores.
# BENCH_FLAGS=-quick for a 30-second run; BENCH_FLAGS='-profile .cache/prof'
# for CPU and heap profiles of every middle (see adstap-bench -h).
BENCH_FLAGS ?=
.PHONY: bench
bench:
	$(GO) build -o .cache/bin/adstap-bench ./benchmark/cmd/adstap-bench
	CGO_ENABLED=0 $(GO) build -trimpath -o .cache/bin/adstap ./cmd/adstap
	.cache/bin/adstap-bench $(BENCH_FLAGS)

# A change to a hot path against a base commit (docs/performance.md): the
# base's adstap binary and this tree's, each with its default flags,
# alternated through W1, W2, W6 and W7 with the pass-through relay beside
# them in every round; head/base ratios, medians of rounds, with their range.
# About 10 minutes of measurements on 2 cores; COMPARE_FLAGS=-quick for a few;
# COMPARE_FLAGS='-out docs/performance.md' writes the table there too.
BASE          ?=
COMPARE_FLAGS ?=
.PHONY: bench-compare
bench-compare:
	@test -n "$(BASE)" || { echo "bench-compare: say which commit to compare with: make bench-compare BASE=<commit>" >&2; exit 2; }
	GO=$(GO) bash scripts/bench-compare.sh $(BASE) $(COMPARE_FLAGS)

# A short run of each fuzz target on top of its seeds: the envelope decoder's
# on its checked-in corpus, and the reference graph's, the redactor's and the
# Istio-object scanner's, which start from the same frames.
fuzz-short:
	GO=$(GO) bash scripts/fuzz-short.sh

# The alert rules in deploy/: promtool checks the rule file and runs its unit
# tests. scripts/ensure-promtool.sh finds promtool or brings it (Debian's
# prometheus package when apt-get can run, else a build from the Go module
# proxy into .cache/bin); PROMTOOL=/path/to/promtool picks one.
rules:
	@promtool=$$(bash scripts/ensure-promtool.sh) || exit 1; \
	echo "$$promtool check rules deploy/alerts.yaml" && "$$promtool" check rules deploy/alerts.yaml && \
	echo "$$promtool test rules deploy/alerts_test.yaml" && "$$promtool" test rules deploy/alerts_test.yaml

lint: vet staticcheck
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

# staticcheck, pinned and run through go run (no install step; the module
# proxy's copy is cached after the first run), as grpc-go runs it: its
# default checks, once without build tags and once with the demo's, so that
# the files either side of //go:build demo are both checked. A finding that
# is right to keep is said so on its line, with a //lint:ignore giving the
# reason. The Istio and dashboard modules are not linted.
STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2
staticcheck:
	$(GO) run $(STATICCHECK) $(PKGS)
	$(GO) run $(STATICCHECK) -tags demo $(PKGS)

vet:
	$(GO) vet $(PKGS)
	$(GO) vet -tags demo ./cmd/adstap

fmt:
	gofmt -w $$(git ls-files '*.go')

clean:
	rm -rf bin
