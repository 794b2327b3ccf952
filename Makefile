# setnxlock: `make demo` and `make test` work on a fresh machine with Go;
# the real-server half of the tests needs redis-server (apt-get install
# redis-server), which .ci/run installs when it is missing.

GO                  ?= go
STATICCHECK_VERSION ?= v0.8.2
BENCH_COUNT         ?= 5
BENCH_OUT           ?= bench.out
FUZZTIME            ?= 10s
CHAOS_SEED          ?= 1
MODE                ?= all
SOAK_DURATION       ?= 10m
TEST_TIMEOUT        ?= 8m

.PHONY: test demo worker lint bench chaos soak fuzz interop-cronlock cli election failover

## test: every test, with the race detector (the library, internal/chaos, cmd/setnxlock, examples, setnxlockotel), on miniredis and on redis-server processes the tests start; a hang fails within TEST_TIMEOUT, printing every goroutine
test:
	$(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) ./...
	@# internal/chaos is a module of its own (Porcupine stays out of the library's go.mod)
	cd internal/chaos && $(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) ./...
	@# cmd/setnxlock is a module of its own too (pflag stays out of the library's go.mod); its tests run the built binary
	cd cmd/setnxlock && $(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) ./...
	@# examples/ is a module of its own, so the embedded miniredis of its programs is no requirement of the library's packages
	cd examples && $(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) ./...
	@# setnxlockotel is a module of its own (OpenTelemetry stays out of the library's go.mod); its tests start a redis-server
	cd setnxlockotel && $(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) ./...

## cli: the command-line tool, built from this clone into bin/setnxlock (version from git describe)
cli:
	cd cmd/setnxlock && $(GO) build -ldflags "-X main.version=$$(git describe --tags --always --dirty 2>/dev/null || echo devel)" -o ../../bin/setnxlock .

## chaos: the fault-injection harness in every mode (MODE=default for one), >= 10^4 acquisitions each, then every assumption broken in each; fails on any violation or liveness failure, or a broken assumption not caught (docs/RELIABILITY.md)
chaos:
	cd internal/chaos && $(GO) run ./cmd/chaos -q -seed $(CHAOS_SEED) -mode $(MODE) -broken

## soak: the same harness for SOAK_DURATION per mode, with no acquisition limit
soak:
	cd internal/chaos && $(GO) run ./cmd/chaos -q -seed $(CHAOS_SEED) -mode $(MODE) -acquisitions 0 -duration $(SOAK_DURATION)

## election: candidate processes on a real redis-server, ELECTION_ROUNDS leaders killed with SIGKILL (default 100), then a SIGSTOP and a resign; prints the failover time (p50/p99) and checks that no two leaderships overlap
ELECTION_ROUNDS ?= 100
election:
	SETNXLOCK_ELECTION_ROUNDS=$(ELECTION_ROUNDS) $(GO) test -race -count=1 -timeout 30m -run '^TestElectionAmongProcesses$$' -v .

## failover: Lockers through real Sentinel failovers: workers resuming after a SIGKILL and a SIGSTOP of the primary; WithReplicas, FAILOVER_ROUNDS rounds with it and without it (default 10): no second holder with it, how often one gets in without it
FAILOVER_ROUNDS ?= 10
failover:
	SETNXLOCK_FAILOVER_ROUNDS=$(FAILOVER_ROUNDS) $(GO) test -race -count=1 -timeout 30m -run '^(TestLockersKeepWorkingThroughAFailover|TestWithReplicasALeaseSurvivesAFailover)$$' -v .

## demo: a crashed holder's lock recovered with GETSET, as a timeline (embedded miniredis; REDIS_ADDR=host:port for a real server)
demo:
	cd examples && $(GO) run ./crashrecovery

## worker: workers incrementing a Redis counter with and without the lock
worker:
	cd examples && $(GO) run ./worker

## lint: gofmt, go vet and staticcheck must all be clean, in the library and in each module beside it (internal/chaos, cmd/setnxlock, examples, setnxlockotel)
lint:
	@unformatted="$$(gofmt -l .)"; if [ -n "$$unformatted" ]; then echo "gofmt would change:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet ./...
	$(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) ./...
	cd internal/chaos && $(GO) vet ./... && $(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) ./...
	cd cmd/setnxlock && $(GO) vet ./... && $(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) ./...
	cd examples && $(GO) vet ./... && $(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) ./...
	cd setnxlockotel && $(GO) vet ./... && $(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) ./...

## bench: Go benchmarks, the uncontended ratio to a raw SETNX+DEL loop, the OpenTelemetry observer's cost on that cycle, then bench/ against bsm/redislock, redsync and sync.Mutex (writes docs/BENCHMARKS.md, docs/benchmarks.png; BENCH_FLAGS='-duration=2s -rounds=7' to change; fewer than 5 rounds marks the targets provisional)
bench:
	@# rounds interleave the floor and the library, so drift on a shared machine hits both alike
	@rm -f $(BENCH_OUT); for round in $$(seq $(BENCH_COUNT)); do \
	  $(GO) test -run '^$$' -bench . -benchmem -count 1 . | tee -a $(BENCH_OUT) || exit 1; done
	@awk '/UncontendedCycle\/raw/ { raw += $$3; rn++ } \
	      /UncontendedCycle\/setnxlock-[0-9]+[ \t]/ { lib += $$3; ln++ } \
	      END { if (!rn || !ln) { print "bench: uncontended results missing"; exit 1 } \
	            printf "\nuncontended acquire+release: %.0f cycles/s; raw SETNX+DEL: %.0f cycles/s; ratio %.2fx\n", \
	                   1e9 / (lib / ln), 1e9 / (raw / rn), (raw / rn) / (lib / ln) }' $(BENCH_OUT)
	@# setnxlockotel: the same cycle with its OpenTelemetry observer off and on (rows observer-off, observer-on, observer-on-metrics-only)
	cd setnxlockotel && $(GO) test -run '^$$' -bench . -benchmem -count $(BENCH_COUNT) . | tee $(abspath $(BENCH_OUT)).otel
	@awk '$$1 ~ /\/observer-off(-[0-9]+)?$$/ { off += $$3; fn++ } $$1 ~ /\/observer-on(-[0-9]+)?$$/ { on += $$3; nn++ } \
	      END { if (!fn || !nn) { print "bench: observer results missing"; exit 1 } \
	            printf "\nuncontended cycle with the OpenTelemetry observer: %.1fus against %.1fus without (%+.0f%%)\n", \
	                   on / nn / 1e3, off / fn / 1e3, 100 * (on / nn - off / fn) / (off / fn) }' $(BENCH_OUT).otel
	@# bench/ is its own module, so the library's go.mod never depends on the peers it is compared with
	cd bench && $(GO) run . -out=../docs $(BENCH_FLAGS)

## fuzz: each fuzz target for FUZZTIME (default 10s); a failing input is saved under testdata/fuzz/ and replayed by every later go test
fuzz:
	@for target in FuzzParseExpiry FuzzFormatRoundTrip FuzzOperationSequences; do \
	  echo "fuzz: $$target for $(FUZZTIME)"; \
	  $(GO) test -run '^$$' -fuzz "^$$target\$$" -fuzztime $(FUZZTIME) . || exit 1; done

## interop-cronlock: kvz/cronlock's script itself against two Lockers on one key (CRONLOCK_SCRIPT=path to a copy of github.com/kvz/cronlock's cronlock; CI cannot fetch it)
interop-cronlock:
	@if [ -z "$(CRONLOCK_SCRIPT)" ]; then echo "interop-cronlock: set CRONLOCK_SCRIPT to a copy of github.com/kvz/cronlock's script"; exit 1; fi
	CRONLOCK_SCRIPT=$(abspath $(CRONLOCK_SCRIPT)) $(GO) test -count=1 -run TestTheRealCronlockAndLockersNeverHoldTogether -v ./interop
