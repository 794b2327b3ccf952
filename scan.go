package setnxlock

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/redis/go-redis/v9"
)

// Listing the lock keys that match a pattern, for the operator's "what is
// locked right now": SCAN, never KEYS, which blocks the server for as long
// as it walks the whole keyspace.

// scanCount is the COUNT hint of each SCAN: the keys the server looks at
// per round trip, not a limit on the result.
const scanCount = 1000

// statusBatch is how many keys' statuses one pipeline reads.
const statusBatch = 100

// ScanStatus lists, sorted by key, the status (Status) of every key that
// matches pattern (Redis's glob-style MATCH pattern, such as "lock.*"),
// found with SCAN on every master of a Cluster or shard of a Ring. The
// keys the library keeps beside a lock key (its queue, release marker,
// fence counter, an election's record) are left out; any other key that
// matches is listed, with Foreign set if it holds no lock value. It
// writes nothing. SCAN may miss a key created or deleted while it runs,
// and a key deleted before its status is read is left out. Every key
// that matches is held in memory at once: give a pattern that matches the
// lock keys, not the whole keyspace. An empty pattern is
// ErrInvalidArgument; errors are network errors and replies such as
// NOPERM.
func (l *Locker) ScanStatus(ctx context.Context, pattern string) ([]KeyStatus, error) {
	if pattern == "" {
		return nil, fmt.Errorf("%w: empty pattern", ErrInvalidArgument)
	}
	keys, err := l.scanKeys(ctx, pattern)
	if err != nil {
		return nil, fmt.Errorf("setnxlock: scan %q: %w", pattern, err)
	}
	statuses := make([]KeyStatus, 0, len(keys))
	for batch := range slices.Chunk(keys, statusBatch) {
		reads := make([]statusRead, 0, len(batch))
		// Each command's own reply is read below; Pipelined's error is the first of them.
		_, _ = l.client.Pipelined(ctx, func(pipe redis.Pipeliner) error {
			for _, key := range batch {
				reads = append(reads, readStatus(ctx, pipe, key))
			}
			return nil
		})
		now := l.cfg.clock.Now()
		for _, read := range reads {
			status, err := read.status(now, l.takeableAt)
			if err != nil {
				return nil, err
			}
			if status.Exists {
				statuses = append(statuses, status)
			}
		}
	}
	return statuses, nil
}

// scanKeys returns, sorted and once each, the keys that match pattern on
// every node that holds keys, but the library's own (isLibraryKey).
func (l *Locker) scanKeys(ctx context.Context, pattern string) ([]string, error) {
	var mu sync.Mutex
	found := map[string]struct{}{}
	scan := func(ctx context.Context, node redis.Cmdable) error {
		var cursor uint64
		for {
			keys, next, err := node.Scan(ctx, cursor, pattern, scanCount).Result()
			if err != nil {
				return err
			}
			mu.Lock()
			for _, key := range keys {
				if !isLibraryKey(key) {
					found[key] = struct{}{}
				}
			}
			mu.Unlock()
			if next == 0 {
				return nil
			}
			cursor = next
		}
	}
	var err error
	switch c := l.client.(type) {
	case *redis.ClusterClient:
		err = c.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error { return scan(ctx, node) })
	case *redis.Ring:
		err = c.ForEachShard(ctx, func(ctx context.Context, node *redis.Client) error { return scan(ctx, node) })
	default:
		err = scan(ctx, l.client)
	}
	if err != nil {
		return nil, err
	}
	keys := make([]string, 0, len(found))
	for key := range found {
		keys = append(keys, key)
	}
	slices.Sort(keys)
	return keys, nil
}
