package setnxlock

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/setnxlock/setnxlock/internal/await"
	"github.com/setnxlock/setnxlock/internal/faultproxy"
)

// A read/write lock (rwlock.go) is a writer key and a key per reader;
// these tests hold it to one writer beside nobody, with readers really
// concurrent, each counted only while its own lease is live, on every
// path and backend, and check its queue order, fencing, recovery of
// crashed holders and the hazards of its own transactions.

func rwOf(t *testing.T, l *Locker, name string) *RWLock {
	t.Helper()
	rw, err := l.RWLock(name)
	require.NoError(t, err)
	return rw
}

// rwSections records critical sections of readers and writers, each
// counted only while its holder's own lease was live on entry and exit.
type rwSections struct {
	mu       sync.Mutex
	sections []rwSection
	overran  int
}

type rwSection struct {
	from, to time.Time
	writer   bool
}

func (s *rwSections) hold(lock *Lock, writer bool, body func()) {
	from, to, live := heldThrough(lock, systemClock{}, body)
	s.mu.Lock()
	defer s.mu.Unlock()
	if !live {
		s.overran++
		return
	}
	s.sections = append(s.sections, rwSection{from, to, writer})
}

// check reports how many writer sections overlapped another section, and
// the most reader sections that overlapped one another.
func (s *rwSections) check() (writerOverlaps, mostReaders int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, a := range s.sections {
		readers := 1
		for j, b := range s.sections {
			if i == j || !a.from.Before(b.to) || !b.from.Before(a.to) {
				continue
			}
			if a.writer || b.writer {
				writerOverlaps++
			} else if b.from.Before(a.from) || b.from.Equal(a.from) && j < i {
				readers++ // readers inside a's section when it began
			}
		}
		if !a.writer {
			mostReaders = max(mostReaders, readers)
		}
	}
	return writerOverlaps, mostReaders
}

// rwContend runs workers that share the given Lockers round-robin, each
// taking the read/write lock "doc" cycles times, as a writer one time in
// four; crash decides whether a holder abandons its lock instead of
// releasing it. Inside each section it checks that no writer is beside
// another holder.
func rwContend(t *testing.T, lockers []*Locker, workers, cycles int, crash func() bool) *rwSections {
	t.Helper()
	var s rwSections
	var writers, readers atomic.Int64
	var wg sync.WaitGroup
	waitCtx := await.Context(t)
	for w := range workers {
		rw := rwOf(t, lockers[w%len(lockers)], "doc")
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range cycles {
				writer := rand.IntN(4) == 0
				take, count := rw.RLock, &readers
				if writer {
					take, count = rw.Lock, &writers
				}
				lock, err := take(waitCtx)
				if !assert.NoError(t, err) {
					return
				}
				s.hold(lock, writer, func() {
					count.Add(1)
					if writer {
						assert.Equal(t, int64(1), writers.Load(), "two writers at once")
						assert.Zero(t, readers.Load(), "a writer beside a reader")
					} else {
						assert.Zero(t, writers.Load(), "a reader beside a writer")
					}
					runtime.Gosched()
					time.Sleep(time.Duration(rand.IntN(2000)) * time.Microsecond)
					count.Add(-1)
				})
				if crash() {
					continue // the holder dies: its lease must run out first
				}
				err = lock.Release(waitCtx)
				if errors.Is(err, ErrNotHeld) && expired(lock.ExpiresAt(), time.Now()) {
					continue // it overran its lease: not counted (H8)
				}
				assert.NoError(t, err)
			}
		}()
	}
	await.Group(t, &wg, "the read/write lock's workers")
	overlaps, most := s.check()
	t.Logf("%d sections, %d overran their lease; at most %d readers at once", len(s.sections), s.overran, most)
	assert.Zero(t, overlaps, "a writer's section overlapped another holder's")
	return &s
}

func TestRWLockNeverAWriterBesideAnotherHolder(t *testing.T) {
	const workers, lockers, cycles = 8, 3, 12
	onEachPath(t, func(t *testing.T, b *backend, p lockPath) {
		ls := make([]*Locker, lockers)
		for i := range ls {
			ls[i] = b.locker(t, p.opt, WithClock(systemClock{}), WithBackoff(100*time.Microsecond, 2*time.Millisecond))
		}
		rwContend(t, ls, workers, cycles, func() bool { return false })
		assert.Equal(t, "<missing>", b.value(t, WriterKey("doc")), "the writer key is released")
		assert.Zero(t, b.raw.Exists(ctx, ReadersKey("doc")).Val(), "every reader took itself off the list")
	})
}

// Holders crash now and then, readers and writers: their leases run out,
// crashed readers are pruned by writers, crashed writers taken over, and
// no writer is ever beside another holder.
func TestRWLockRecoversCrashesUnderContention(t *testing.T) {
	const workers, lockers, cycles = 8, 3, 12
	onEachBackend(t, func(t *testing.T, b *backend) {
		var crashes atomic.Int64
		rwContend(t, crashingLockers(t, b, lockers), workers, cycles, crashOneIn(15, &crashes))
		t.Logf("%d crashed holders recovered", crashes.Load())
	})
}

// With fencing, a fence counter that is not an integer (H7) refuses the
// reader, and its reader key is undone.
func TestRWLockReaderRefusedByAForeignFenceCounter(t *testing.T) {
	onEachPath(t, func(t *testing.T, b *backend, p lockPath) {
		b.set(t, FenceKey(WriterKey("doc")), "garbage")
		_, err := rwOf(t, b.locker(t, p.opt, WithFencing()), "doc").TryRLock(ctx)
		assert.ErrorIs(t, err, ErrNotLockValue)
		assert.Empty(t, b.raw.Keys(ctx, ReaderKey("doc", "*")).Val(), "the reader key was undone")
		assert.Equal(t, "garbage", b.value(t, FenceKey(WriterKey("doc"))))
	})
}

// Readers share; a writer excludes them and other writers.
func TestRWLockReadersShareAWriterExcludes(t *testing.T) {
	onEachPath(t, func(t *testing.T, b *backend, p lockPath) {
		rw := rwOf(t, b.locker(t, p.opt), "doc")
		r1, err := rw.TryRLock(ctx)
		require.NoError(t, err)
		r2, err := rw.TryRLock(ctx)
		require.NoError(t, err, "a second reader beside the first")
		assert.NotEqual(t, r1.Key(), r2.Key())
		_, err = rw.TryLock(ctx)
		assert.ErrorIs(t, err, ErrNotAcquired, "a writer beside readers")
		assert.Equal(t, "<missing>", b.value(t, WriterKey("doc")), "the refused writer gave its key back")
		require.NoError(t, r1.Release(ctx))
		require.NoError(t, r2.Release(ctx))
		assert.Zero(t, b.raw.Exists(ctx, ReadersKey("doc")).Val(), "released readers are off the list")

		w, err := rw.TryLock(ctx)
		require.NoError(t, err)
		_, err = rw.TryRLock(ctx)
		assert.ErrorIs(t, err, ErrNotAcquired, "a reader beside a writer")
		_, err = rw.TryLock(ctx)
		assert.ErrorIs(t, err, ErrNotAcquired, "two writers")
		require.NoError(t, w.Release(ctx))
		r3, err := rw.TryRLock(ctx)
		require.NoError(t, err)
		require.NoError(t, r3.Release(ctx))
	})
}

// A crashed reader and a crashed writer are recovered once their leases
// end (and the skew margin after), with no help from them.
func TestRWLockRecoversCrashedReaderAndWriter(t *testing.T) {
	onEachPath(t, func(t *testing.T, b *backend, p lockPath) {
		l := b.locker(t, p.opt)
		rw := rwOf(t, l, "doc")
		reader, err := rwOf(t, b.locker(t, p.opt), "doc").TryRLock(ctx)
		require.NoError(t, err)
		_, err = rw.TryLock(ctx)
		require.ErrorIs(t, err, ErrNotAcquired, "the crashed reader's lease is live")
		b.clock.Set(reader.ExpiresAt().Add(l.cfg.skewMargin - time.Millisecond))
		_, err = rw.TryLock(ctx)
		require.ErrorIs(t, err, ErrNotAcquired, "not before the skew margin has passed (H4)")
		b.clock.Advance(time.Millisecond)
		writer, err := rwOf(t, b.locker(t, p.opt), "doc").TryLock(ctx)
		require.NoError(t, err, "the crashed reader's lease is over")
		assert.Equal(t, "<missing>", b.value(t, reader.Key()), "its key was deleted")
		assert.Zero(t, b.raw.Exists(ctx, ReadersKey("doc")).Val(), "and its id taken off the list")

		_, err = rw.TryRLock(ctx)
		require.ErrorIs(t, err, ErrNotAcquired, "the crashed writer's lease is live")
		b.clock.Set(writer.ExpiresAt().Add(l.cfg.skewMargin + time.Millisecond))
		r, err := rw.TryRLock(ctx)
		require.NoError(t, err, "the crashed writer's lease is over")
		require.NoError(t, r.Release(ctx))
	})
}

// The clock never moves, so no reader's lease ever ends: a writer waiting
// behind a stream of readers gets in only because the readers admitted
// before it end and no new one is admitted meanwhile (within one reader
// lease, here none at all).
func TestRWLockWriterIsNotStarvedByReaders(t *testing.T) {
	onEachPath(t, func(t *testing.T, b *backend, p lockPath) {
		const readers = 4
		waitCtx := await.Context(t)
		stop := make(chan struct{})
		var wg sync.WaitGroup
		var reads atomic.Int64
		for range readers {
			rw := rwOf(t, b.locker(t, p.opt), "doc")
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					default:
					}
					lock, err := rw.RLock(waitCtx)
					if !assert.NoError(t, err) {
						return
					}
					reads.Add(1)
					time.Sleep(time.Duration(rand.IntN(3000)) * time.Microsecond)
					assert.NoError(t, lock.Release(waitCtx))
				}
			}()
		}
		for reads.Load() < readers { // the stream is flowing
			require.NoError(t, waitCtx.Err(), "the readers did not start")
			time.Sleep(time.Millisecond)
		}
		writer, err := rwOf(t, b.locker(t, p.opt), "doc").Lock(waitCtx)
		require.NoError(t, err, "the writer got in behind the readers")
		close(stop)
		require.NoError(t, writer.Release(ctx))
		await.Group(t, &wg, "the readers")
	})
}

// takeInBackground starts take (RLock or Lock) until the test's deadline
// and returns where its lock will arrive (nil after a failure, reported).
func takeInBackground(t *testing.T, take func(context.Context) (*Lock, error), what string) <-chan *Lock {
	t.Helper()
	waitCtx := await.Context(t)
	got := make(chan *Lock, 1)
	go func() {
		lock, err := take(waitCtx)
		assert.NoError(t, err, what)
		got <- lock
	}()
	return got
}

// Readers and writers wait in one line: a reader, a writer and a reader
// queued behind a writer are served in that order, the queued writer
// draining the first reader, the second reader refused while the writer
// waits before it.
func TestRWLockServesReadersAndWritersInArrivalOrder(t *testing.T) {
	onEachPath(t, func(t *testing.T, b *backend, p lockPath) {
		opts := []Option{p.opt, WithStarvationThreshold(0)}
		first, err := rwOf(t, b.locker(t, opts...), "doc").Lock(ctx)
		require.NoError(t, err)
		waitCtx := await.Context(t)
		served := make(chan string, 3)
		var wg sync.WaitGroup
		queue := func(who string, take func(context.Context) (*Lock, error)) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				lock, err := take(waitCtx)
				if !assert.NoError(t, err, who) {
					return
				}
				served <- who
				time.Sleep(2 * time.Millisecond)
				assert.NoError(t, lock.Release(waitCtx), who)
			}()
		}
		queue("reader 1", rwOf(t, b.locker(t, opts...), "doc").RLock)
		b.queued(t, WriterKey("doc"), 1)
		queue("writer 2", rwOf(t, b.locker(t, opts...), "doc").Lock)
		b.queued(t, WriterKey("doc"), 2)
		_, err = rwOf(t, b.locker(t, opts...), "doc").TryRLock(ctx)
		assert.ErrorIs(t, err, ErrNotAcquired, "a reader passed the queue")
		queue("reader 3", rwOf(t, b.locker(t, opts...), "doc").RLock)
		b.queued(t, WriterKey("doc"), 3)
		require.NoError(t, first.Release(ctx))
		await.Group(t, &wg, "the queued readers and writer")
		close(served)
		var order []string
		for who := range served { // bounded: closed above
			order = append(order, who)
		}
		assert.Equal(t, []string{"reader 1", "writer 2", "reader 3"}, order)
	})
}

// TryRLock is refused while a writer holds the lock, and while one waits
// in its queue though the key is free; nothing of the reader is written.
func TestTryRLockRefusedWhileAWriterHoldsOrWaits(t *testing.T) {
	onEachPath(t, func(t *testing.T, b *backend, p lockPath) {
		rw := rwOf(t, b.locker(t, p.opt), "doc")
		w, err := rw.TryLock(ctx)
		require.NoError(t, err)
		_, err = rw.TryRLock(ctx)
		assert.ErrorIs(t, err, ErrNotAcquired)
		require.NoError(t, w.Release(ctx))

		require.NoError(t, b.raw.ZAdd(ctx, waitersKey(WriterKey("doc")), redis.Z{Score: 1, Member: "locker:token"}).Err())
		_, err = rw.TryRLock(ctx)
		assert.ErrorIs(t, err, ErrNotAcquired, "a reader passed a queued writer")
		assert.Zero(t, b.raw.Exists(ctx, ReadersKey("doc")).Val(), "a refused reader wrote nothing")
	})
}

// A wait that ends with its context says so (ErrNotAcquired and the
// context's error), and leaves nothing held: a writer that gave up while
// readers drained gives its key back.
func TestRWLockWaitsEndWithTheirContext(t *testing.T) {
	onEachPath(t, func(t *testing.T, b *backend, p lockPath) {
		rw := rwOf(t, b.locker(t, p.opt), "doc")
		w, err := rw.TryLock(ctx)
		require.NoError(t, err)
		short, cancel := context.WithTimeout(ctx, 30*time.Millisecond)
		_, err = rwOf(t, b.locker(t, p.opt), "doc").RLock(short)
		cancel()
		assert.ErrorIs(t, err, ErrNotAcquired)
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		require.NoError(t, w.Release(ctx))

		r, err := rw.TryRLock(ctx)
		require.NoError(t, err)
		short, cancel = context.WithTimeout(ctx, 30*time.Millisecond)
		_, err = rwOf(t, b.locker(t, p.opt), "doc").Lock(short)
		cancel()
		assert.ErrorIs(t, err, ErrNotAcquired)
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Equal(t, "<missing>", b.value(t, WriterKey("doc")), "the writer that gave up gave its key back")
		r2, err := rw.TryRLock(ctx)
		require.NoError(t, err, "readers are admitted again")
		require.NoError(t, r.Release(ctx))
		require.NoError(t, r2.Release(ctx))
	})
}

// With fencing every token of the lock comes from one counter: a writer's
// is above every earlier one, a reader's above the last writer's.
func TestRWLockFencingTokensIncrease(t *testing.T) {
	onEachPath(t, func(t *testing.T, b *backend, p lockPath) {
		rw := rwOf(t, b.locker(t, p.opt, WithFencing()), "doc")
		w1, err := rw.Lock(ctx)
		require.NoError(t, err)
		require.NoError(t, w1.Release(ctx))
		r1, err := rw.RLock(ctx)
		require.NoError(t, err)
		r2, err := rw.TryRLock(ctx)
		require.NoError(t, err)
		assert.Greater(t, r1.FencingToken(), w1.FencingToken())
		assert.Greater(t, r2.FencingToken(), w1.FencingToken())
		require.NoError(t, r1.Release(ctx))
		require.NoError(t, r2.Release(ctx))
		w2, err := rw.Lock(ctx)
		require.NoError(t, err)
		assert.Greater(t, w2.FencingToken(), r1.FencingToken())
		assert.Greater(t, w2.FencingToken(), r2.FencingToken())

		// A reader that waited in line converts with a token above the
		// writer's it waited behind.
		waiting := make(chan struct{})
		var once sync.Once
		queued := rwOf(t, b.locker(t, p.opt, WithFencing(), WithObserver(ObserverFunc(func(e Event) {
			if e.Kind == EventWaiting && e.Key == WriterKey("doc") {
				once.Do(func() { close(waiting) })
			}
		}))), "doc")
		got := takeInBackground(t, queued.RLock, "the queued reader")
		await.Recv(t, waiting, "the refused reader's wait for the writer key")
		require.NoError(t, w2.Release(ctx))
		r3 := await.Recv(t, got, "the waiting reader")
		require.NotNil(t, r3)
		assert.Greater(t, r3.FencingToken(), w2.FencingToken())
		require.NoError(t, r3.Release(ctx))
	})
}

// H5: a reader transaction whose EXEC reply is lost deletes its reader key
// before it returns the error: a writer gets in at once, not a lease later.
func TestRWLockLostReaderReplyCostsNoLease(t *testing.T) {
	onEachPath(t, func(t *testing.T, b *backend, p lockPath) {
		client := b.client(t)
		reader := rwOf(t, b.lockerOn(t, client, p.opt), "doc")
		loseReply(client, "sadd")
		_, err := reader.TryRLock(ctx)
		require.Error(t, err)
		keys := b.raw.Keys(ctx, ReaderKey("doc", "*")).Val()
		assert.Empty(t, keys, "the reader key whose reply was lost is gone")
		w, err := rwOf(t, b.locker(t, p.opt), "doc").TryLock(ctx)
		require.NoError(t, err, "a writer is not kept out by a reader key nobody holds")
		require.NoError(t, w.Release(ctx))
	})
}

// An expired reader key is deleted, not only ignored, by the writer that
// judged it over: its reader, whose clock says its lease is live (a
// Refresh late in the network, or a clock behind), cannot renew it beside
// the writer.
func TestRWLockExpiredReaderRefreshedLateIsNotASecondHolder(t *testing.T) {
	onEachPath(t, func(t *testing.T, b *backend, p lockPath) {
		readerClock := NewManualClock(b.start)
		reader, err := rwOf(t, b.locker(t, p.opt, WithClock(readerClock)), "doc").TryRLock(ctx)
		require.NoError(t, err)
		l := b.locker(t, p.opt)
		b.clock.Set(reader.ExpiresAt().Add(l.cfg.skewMargin + time.Millisecond))
		w, err := rwOf(t, l, "doc").TryLock(ctx)
		require.NoError(t, err, "the reader's lease is over by the writer's clock")
		err = reader.Refresh(ctx, 10*time.Second)
		assert.ErrorIs(t, err, ErrNotHeld, "the reader renewed its key beside the writer")
		assert.Equal(t, "<missing>", b.value(t, reader.Key()))
		require.NoError(t, w.Release(ctx))
	})
}

// Bad input is ErrInvalidArgument, and nothing is written.
func TestRWLockRefusesBadInputAndWritesNothing(t *testing.T) {
	onEachBackend(t, func(t *testing.T, b *backend) {
		l := b.locker(t)
		for _, name := range []string{"", "}doc"} {
			_, err := l.RWLock(name)
			assert.ErrorIs(t, err, ErrInvalidArgument, "name %q", name)
		}
		_, err := b.locker(t, WithFormat(UnixSeconds)).RWLock("doc")
		assert.ErrorIs(t, err, ErrInvalidArgument, "a bare format")
		assert.Zero(t, b.raw.DBSize(ctx).Val(), "nothing was written")
	})
}

// H7: a writer key or a reader key that holds no lock value is reported
// (ErrNotLockValue) and left untouched; a reader key of garbage blocks
// writers.
func TestRWLockLeavesForeignValuesAlone(t *testing.T) {
	onEachPath(t, func(t *testing.T, b *backend, p lockPath) {
		rw := rwOf(t, b.locker(t, p.opt), "doc")
		b.set(t, WriterKey("doc"), "garbage")
		_, err := rw.TryRLock(ctx)
		assert.ErrorIs(t, err, ErrNotLockValue)
		_, err = rw.RLock(await.Context(t))
		assert.ErrorIs(t, err, ErrNotLockValue)
		assert.Equal(t, "garbage", b.value(t, WriterKey("doc")))
		require.NoError(t, b.raw.Del(ctx, WriterKey("doc")).Err())

		b.set(t, ReaderKey("doc", "x"), "garbage")
		require.NoError(t, b.raw.SAdd(ctx, ReadersKey("doc"), "x").Err())
		_, err = rw.TryLock(ctx)
		assert.ErrorIs(t, err, ErrNotLockValue)
		_, err = rw.Lock(await.Context(t))
		assert.ErrorIs(t, err, ErrNotLockValue)
		assert.Equal(t, "garbage", b.value(t, ReaderKey("doc", "x")))
		assert.Equal(t, "<missing>", b.value(t, WriterKey("doc")), "the blocked writer gave its key back")
	})
}

// A reader that waited in the writer key's queue converts only while the
// key still holds its own value: had its lease ended and a writer taken
// the key over, the reader is refused and writes nothing.
func TestRWLockConvertsOnlyWhileItHoldsItsPlaceInLine(t *testing.T) {
	onEachPath(t, func(t *testing.T, b *backend, p lockPath) {
		l := b.locker(t, p.opt)
		held, err := l.TryAcquire(ctx, WriterKey("doc"))
		require.NoError(t, err)
		b.clock.Set(held.ExpiresAt().Add(l.cfg.skewMargin + time.Millisecond))
		other, err := b.locker(t, p.opt).TryAcquire(ctx, WriterKey("doc"))
		require.NoError(t, err, "a writer took the expired key over")
		_, err = rwOf(t, l, "doc").admit(ctx, held)
		assert.ErrorIs(t, err, ErrNotAcquired, "a reader converted beside a writer")
		assert.Zero(t, b.raw.Exists(ctx, ReadersKey("doc")).Val(), "the refused reader wrote nothing")
		require.NoError(t, other.Release(ctx))
	})
}

// Status reads the writer, its queue and the live readers, writing
// nothing.
func TestRWLockStatusReadsWriterAndReaders(t *testing.T) {
	onEachPath(t, func(t *testing.T, b *backend, p lockPath) {
		rw := rwOf(t, b.locker(t, p.opt, WithIdentity("reports-1")), "doc")
		status, err := rw.Status(ctx)
		require.NoError(t, err)
		assert.False(t, status.Writer.Held)
		assert.Empty(t, status.Readers)
		assert.Zero(t, b.raw.DBSize(ctx).Val(), "Status wrote nothing")

		r1, err := rw.TryRLock(ctx)
		require.NoError(t, err)
		r2, err := rw.TryRLock(ctx)
		require.NoError(t, err)
		status, err = rw.Status(ctx)
		require.NoError(t, err)
		assert.Equal(t, "doc", status.Name)
		assert.False(t, status.Writer.Held)
		require.Len(t, status.Readers, 2)
		assert.ElementsMatch(t, []string{r1.Key(), r2.Key()}, []string{status.Readers[0].Key, status.Readers[1].Key})
		for _, reader := range status.Readers {
			assert.Equal(t, "reports-1", reader.Identity)
			assert.True(t, r1.ExpiresAt().Equal(reader.ExpiresAt), "%s ends when its lease does", reader.Key)
		}
		require.NoError(t, r1.Release(ctx))
		require.NoError(t, r2.Release(ctx))

		w, err := rw.TryLock(ctx)
		require.NoError(t, err)
		status, err = rw.Status(ctx)
		require.NoError(t, err)
		assert.True(t, status.Writer.Held)
		assert.True(t, w.ExpiresAt().Equal(status.Writer.ExpiresAt), "the writer's end")
		require.NoError(t, w.Release(ctx))
	})
}

// Consecutive readers at the head of the line are admitted together: two
// readers queued behind a writer both hold at once, and the writer queued
// after them gets in once both have released.
func TestRWLockAdmitsConsecutiveQueuedReadersTogether(t *testing.T) {
	onEachPath(t, func(t *testing.T, b *backend, p lockPath) {
		opts := []Option{p.opt, WithStarvationThreshold(0)}
		first, err := rwOf(t, b.locker(t, opts...), "doc").Lock(ctx)
		require.NoError(t, err)
		first1 := takeInBackground(t, rwOf(t, b.locker(t, opts...), "doc").RLock, "the first reader")
		b.queued(t, WriterKey("doc"), 1)
		second := takeInBackground(t, rwOf(t, b.locker(t, opts...), "doc").RLock, "the second reader")
		b.queued(t, WriterKey("doc"), 2)
		writerDone := takeInBackground(t, rwOf(t, b.locker(t, opts...), "doc").Lock, "the writer")
		b.queued(t, WriterKey("doc"), 3)
		require.NoError(t, first.Release(ctx))
		r1 := await.Recv(t, first1, "the first queued reader")
		r2 := await.Recv(t, second, "the second queued reader, beside the first")
		require.NotNil(t, r1)
		require.NotNil(t, r2)
		assert.True(t, b.clock.Now().Before(r1.ExpiresAt()) && b.clock.Now().Before(r2.ExpiresAt()), "both readers hold at once")
		assert.Empty(t, writerDone, "the writer got in beside the readers")
		require.NoError(t, r1.Release(ctx))
		require.NoError(t, r2.Release(ctx))
		w := await.Recv(t, writerDone, "the writer queued after the readers")
		require.NotNil(t, w)
		require.NoError(t, w.Release(ctx))
	})
}

// A writer waiting for a reader is woken by the reader's release: with a
// backoff of an hour and leases of an hour, only the announcement can let
// it in before the test's deadline.
func TestRWLockWriterIsWokenByTheLastReadersRelease(t *testing.T) {
	onEachPath(t, func(t *testing.T, b *backend, p lockPath) {
		opts := []Option{p.opt, WithTTL(time.Hour), WithBackoff(time.Hour, time.Hour)}
		reader, err := rwOf(t, b.locker(t, opts...), "doc").TryRLock(ctx)
		require.NoError(t, err)
		got := takeInBackground(t, rwOf(t, b.locker(t, opts...), "doc").Lock, "the writer")
		deadline := time.Now().Add(await.Timeout)
		for b.value(t, WriterKey("doc")) == "<missing>" {
			require.True(t, time.Now().Before(deadline), "the writer did not take the writer key")
			time.Sleep(time.Millisecond)
		}
		require.NoError(t, reader.Release(ctx))
		writer := await.Recv(t, got, "the writer, woken by the reader's release")
		require.NotNil(t, writer)
		require.NoError(t, writer.Release(ctx))
	})
}

// randomLoss loses, once armed, the reply of one command or pipeline in
// oneIn after the server applied it (H5): a network that fails after
// delivery, now and then.
type randomLoss struct {
	oneIn int
	lost  *atomic.Int64
}

func (r randomLoss) DialHook(next redis.DialHook) redis.DialHook { return next }

func (r randomLoss) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if err := next(ctx, cmd); rand.IntN(r.oneIn) != 0 {
			return err
		}
		r.lost.Add(1)
		return errLostReply{}
	}
}

func (r randomLoss) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if err := next(ctx, cmds); isTransactionCheck(cmds) || rand.IntN(r.oneIn) != 0 {
			return err
		}
		r.lost.Add(1)
		return errLostReply{}
	}
}

// Replies are lost now and then, after the server applied the command:
// takes fail or are retried, releases are in doubt and leases run out, and
// still no writer is ever beside another holder.
func TestRWLockExcludesUnderLostReplies(t *testing.T) {
	const workers, lockers, cycles = 8, 4, 8
	onEachPath(t, func(t *testing.T, b *backend, p lockPath) {
		ls := make([]*Locker, lockers)
		var lost atomic.Int64
		for i := range ls {
			client := b.client(t)
			client.AddHook(randomLoss{oneIn: 40, lost: &lost})
			ls[i] = b.lockerOn(t, client, p.opt, WithClock(systemClock{}), WithTTL(200*time.Millisecond), WithBackoff(100*time.Microsecond, 2*time.Millisecond))
		}
		rwUnderFaults(t, ls, workers, cycles, func() string { return fmt.Sprintf("%d replies lost", lost.Load()) })
	})
}

// rwUnderFaults runs workers on the Lockers, round-robin, each taking the
// read/write lock "doc" cycles times (a writer one time in four), through
// whatever faults their clients meet: a take that fails is counted and
// the next one tried, a release may be in doubt and its lease then runs
// out. No writer's section may overlap another holder's, each counted
// while its own lease was live. faults says what was injected, for the log.
func rwUnderFaults(t *testing.T, ls []*Locker, workers, cycles int, faults func() string) {
	t.Helper()
	var s rwSections
	var wg sync.WaitGroup
	var failed atomic.Int64
	waitCtx := await.Context(t)
	for w := range workers {
		rw := rwOf(t, ls[w%len(ls)], "doc")
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range cycles {
				writer := rand.IntN(4) == 0
				take := rw.RLock
				if writer {
					take = rw.Lock
				}
				lock, err := take(waitCtx)
				if err != nil {
					assert.NoError(t, waitCtx.Err(), "the test's deadline passed")
					failed.Add(1)
					continue
				}
				s.hold(lock, writer, func() {
					runtime.Gosched()
					time.Sleep(time.Duration(rand.IntN(2000)) * time.Microsecond)
				})
				_ = lock.Release(waitCtx) // may be in doubt: the lease then runs out
			}
		}()
	}
	await.Group(t, &wg, "the read/write lock's workers")
	overlaps, most := s.check()
	t.Logf("%s; %d sections, %d overran their lease, %d takes failed; at most %d readers at once", faults(), len(s.sections), s.overran, failed.Load(), most)
	assert.Zero(t, overlaps, "a writer's section overlapped another holder's")
}

// Connections are cut and replies lost below go-redis, which retries as
// users' clients do: still no writer beside another holder.
func TestRWLockExcludesThroughCutConnections(t *testing.T) {
	const workers, lockers, cycles = 8, 4, 5
	onEachPath(t, func(t *testing.T, b *backend, p lockPath) {
		proxy := faultproxy.Start(t, b.addr)
		require.NoError(t, proxy.SetFaults(faultproxy.Faults{Seed: rand.Uint64(), LoseRate: 0.01, CutRate: 0.01}))
		ls := make([]*Locker, lockers)
		for i := range ls {
			ls[i] = b.lockerOn(t, b.clientThrough(t, proxy), p.opt, WithClock(systemClock{}), WithTTL(300*time.Millisecond), WithBackoff(100*time.Microsecond, 2*time.Millisecond))
		}
		rwUnderFaults(t, ls, workers, cycles, func() string { return fmt.Sprintf("%d faults injected", proxy.Stats().Total()) })
	})
}
