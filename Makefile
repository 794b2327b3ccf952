# setnxlock: `make demo` and `make test` work on a fresh machine with Go;
# the real-server half of the tests needs redis-server (apt-get install
# redis-server), which .ci/run installs when it is missing.

GO                  ?= go
STATICCHECK_VERSION ?= v0.8.2
BENCH_COUNT         ?= 5
BENCH_OUT           ?= bench.out

.PHONY: test demo worker lint bench

## test: every test, with the race detector, on miniredis and on redis-server processes the tests start
test:
	$(GO) test -race -count=1 ./...

## demo: a crashed holder's lock recovered with GETSET, as a timeline (embedded miniredis; REDIS_ADDR=host:port for a real server)
demo:
	$(GO) run ./examples/crashrecovery

## worker: workers incrementing a Redis counter with and without the lock
worker:
	$(GO) run ./examples/worker

## lint: gofmt, go vet and staticcheck must all be clean
lint:
	@unformatted="$$(gofmt -l .)"; if [ -n "$$unformatted" ]; then echo "gofmt would change:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet ./...
	$(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) ./...

## bench: Go benchmarks, and the uncontended cycle rate as a ratio of a raw SETNX+DEL loop in the same run
bench:
	@# rounds interleave the floor and the library, so drift on a shared machine hits both alike
	@rm -f $(BENCH_OUT); for round in $$(seq $(BENCH_COUNT)); do \
	  $(GO) test -run '^$$' -bench . -benchmem -count 1 . | tee -a $(BENCH_OUT) || exit 1; done
	@awk '/UncontendedCycle\/raw/ { raw += $$3; rn++ } \
	      /UncontendedCycle\/setnxlock/ { lib += $$3; ln++ } \
	      END { if (!rn || !ln) { print "bench: uncontended results missing"; exit 1 } \
	            printf "\nuncontended acquire+release: %.0f cycles/s; raw SETNX+DEL: %.0f cycles/s; ratio %.2fx\n", \
	                   1e9 / (lib / ln), 1e9 / (raw / rn), (raw / rn) / (lib / ln) }' $(BENCH_OUT)
