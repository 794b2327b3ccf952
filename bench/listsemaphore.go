package main

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// The semaphore case's Redis floor: the least any semaphore kept in Redis
// can do. A list holds the free permits; a worker takes one with BLPOP,
// which blocks in the server, and gives it back with RPUSH, whose step
// answers the first blocked BLPOP at once. A handoff is one message from
// the releaser to the server and one from the server to the next holder:
// nothing to hear, claim or look at. It has no lease, so a holder that
// crashes keeps its permit forever, and no owner, so anyone may push a
// permit that was never taken: a measure, not a lock.

// listSemWorker takes a permit from the list named by the case's key.
type listSemWorker struct {
	client  *redis.Client
	permits int
	list    string // of the last acquire
	held    string // the permit taken, "" when none
}

// listSemaphoreLocker makes workers over client that share a list of
// permits free permits.
func listSemaphoreLocker(client *redis.Client, _ time.Duration, permits int) (locker, error) {
	return locker{close: noClose, newWorker: func() worker { return &listSemWorker{client: client, permits: permits} }}, nil
}

// acquire fills the key's list once per key (the first worker to set its
// marker), then blocks in BLPOP until a permit is free or ctx ends.
func (w *listSemWorker) acquire(ctx context.Context, key string) error {
	w.list = key + ".free"
	first, err := w.client.SetNX(ctx, key+".filled", "1", 0).Result()
	if err != nil {
		return err
	}
	if first {
		permits := make([]any, w.permits)
		for i := range permits {
			permits[i] = strconv.Itoa(i)
		}
		if err := w.client.RPush(ctx, w.list, permits...).Err(); err != nil {
			return err
		}
	}
	popped, err := w.client.BLPop(ctx, 0, w.list).Result()
	if err != nil {
		return err
	}
	w.held = popped[1]
	return nil
}

func (w *listSemWorker) release(ctx context.Context) error {
	if w.held == "" {
		return errors.New("release without a permit")
	}
	err := w.client.RPush(ctx, w.list, w.held).Err()
	w.held = ""
	return err
}

func (w *listSemWorker) leaseEnd() time.Time { return time.Time{} }
