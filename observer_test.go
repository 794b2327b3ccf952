package setnxlock

import (
	"bytes"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// events records what an Observer is told.
type events struct {
	mu   sync.Mutex
	seen []Event
}

func (e *events) Observe(ev Event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.seen = append(e.seen, ev)
}

func (e *events) kinds() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var names []string
	for _, ev := range e.seen {
		names = append(names, ev.Kind.String())
	}
	return strings.Join(names, " ")
}

func (e *events) last() Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.seen[len(e.seen)-1]
}

// sameEvent compares events by instant, not by time.Location.
func sameEvent(t *testing.T, want, got Event) {
	t.Helper()
	assert.True(t, want.ExpiresAt.Equal(got.ExpiresAt), "ExpiresAt: want %v, got %v", want.ExpiresAt, got.ExpiresAt)
	want.ExpiresAt, got.ExpiresAt = time.Time{}, time.Time{}
	assert.Equal(t, want, got)
}

func TestObserverHearsEveryEvent(t *testing.T) {
	onEachBackend(t, func(t *testing.T, b *backend) {
		seen := &events{}
		observed := func() *Locker { return b.locker(t, WithObserver(seen), WithFencing()) }

		first, err := observed().TryAcquire(ctx, "lock.k")
		require.NoError(t, err)
		sameEvent(t, Event{Kind: EventAcquired, Key: "lock.k", ExpiresAt: first.ExpiresAt(), FencingToken: first.FencingToken(),
			Attempts: 1, Outcome: OutcomeAcquired, Path: PathScripts}, seen.last())

		_, err = observed().TryAcquire(ctx, "lock.k")
		require.ErrorIs(t, err, ErrNotAcquired)
		sameEvent(t, Event{Kind: EventContended, Key: "lock.k", ExpiresAt: first.ExpiresAt()}, seen.last())

		b.clock.Set(first.ExpiresAt()) // first crashed
		second, err := observed().TryAcquire(ctx, "lock.k")
		require.NoError(t, err)
		sameEvent(t, Event{Kind: EventRecovered, Key: "lock.k", ExpiresAt: second.ExpiresAt(), FencingToken: second.FencingToken(),
			Attempts: 1, Outcome: OutcomeAcquired, Path: PathScripts}, seen.last())
		b.clock.Advance(2 * time.Second)
		require.NoError(t, second.Refresh(ctx, time.Minute))
		sameEvent(t, Event{Kind: EventRefreshed, Key: "lock.k", ExpiresAt: second.ExpiresAt(), FencingToken: second.FencingToken()}, seen.last())
		b.clock.Advance(3 * time.Second)
		require.NoError(t, second.Release(ctx))
		sameEvent(t, Event{Kind: EventReleased, Key: "lock.k", ExpiresAt: second.ExpiresAt(), FencingToken: second.FencingToken(),
			Path: PathScripts, Held: 5 * time.Second}, seen.last())

		third, err := observed().TryAcquire(ctx, "lock.k")
		require.NoError(t, err)
		b.clock.Advance(4 * time.Second)
		b.set(t, "lock.k", strconv.FormatInt(b.start.Add(time.Hour).UnixMilli(), 10))
		refreshErr := third.Refresh(ctx, time.Minute)
		require.ErrorIs(t, refreshErr, ErrNotHeld)
		lost := seen.seen[len(seen.seen)-2]
		assert.ErrorIs(t, lost.Err, ErrNotHeld)
		lost.Err = nil
		sameEvent(t, Event{Kind: EventLost, Key: "lock.k", ExpiresAt: lost.ExpiresAt, FencingToken: third.FencingToken(), Held: 4 * time.Second}, lost)
		sameEvent(t, Event{Kind: EventRefreshFailed, Key: "lock.k", ExpiresAt: third.ExpiresAt(), FencingToken: third.FencingToken(), Err: refreshErr}, seen.last())

		assert.Equal(t, "acquired contended recovered refreshed released acquired lost refresh_failed", seen.kinds())
	})
}

// doneAtAnnouncement records, for each end it is told of, whether the
// Lock's Done channel was already closed then.
type doneAtAnnouncement struct {
	mu     sync.Mutex
	done   <-chan struct{}
	closed []string
}

func (d *doneAtAnnouncement) Observe(ev Event) {
	if ev.Kind != EventLost && ev.Kind != EventReleased {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	select {
	case <-d.done:
		d.closed = append(d.closed, ev.Kind.String()+": Done already closed")
	default:
		d.closed = append(d.closed, ev.Kind.String()+": Done still open")
	}
}

func (d *doneAtAnnouncement) watch(k *Lock) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.done = k.Done()
}

func (d *doneAtAnnouncement) seen() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.closed...)
}

// The observer hears of a lock's end before Done closes, so a Release or
// Refresh that returns on Done, and whoever Done wakes, finds it told.
// Before, Refresh could return ErrNotHeld while the EventLost was still to
// come (TestObserverHearsEveryEvent failed in CI that way).
func TestTheObserverHearsTheEndBeforeDoneCloses(t *testing.T) {
	onEachBackend(t, func(t *testing.T, b *backend) {
		told := &doneAtAnnouncement{}
		l := b.locker(t, WithObserver(told))

		overwritten, err := l.TryAcquire(ctx, "end.overwritten")
		require.NoError(t, err)
		told.watch(overwritten)
		b.set(t, "end.overwritten", strconv.FormatInt(b.start.Add(time.Hour).UnixMilli(), 10))
		require.ErrorIs(t, overwritten.Refresh(ctx, time.Minute), ErrNotHeld)

		ranOut, err := l.TryAcquire(ctx, "end.ranout")
		require.NoError(t, err)
		told.watch(ranOut)
		b.clock.Set(ranOut.ExpiresAt())
		require.ErrorIs(t, ranOut.Refresh(ctx, time.Minute), ErrNotHeld)

		released, err := l.TryAcquire(ctx, "end.released")
		require.NoError(t, err)
		told.watch(released)
		require.NoError(t, released.Release(ctx))

		assert.Equal(t, []string{"lost: Done still open", "lost: Done still open", "released: Done still open"}, told.seen())
	})
}

func TestSlogObserverLogsAtTheRightLevels(t *testing.T) {
	var out bytes.Buffer
	o := NewSlogObserver(slog.New(slog.NewTextHandler(&out, &slog.HandlerOptions{Level: slog.LevelDebug})))
	o.Observe(Event{Kind: EventAcquired, Key: "lock.k", FencingToken: 7})
	o.Observe(Event{Kind: EventRecovered, Key: "lock.k"})
	o.Observe(Event{Kind: EventLost, Key: "lock.k", Err: ErrNotHeld})

	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	require.Len(t, lines, 3)
	assert.Contains(t, lines[0], `level=DEBUG msg="setnxlock: acquired" key=lock.k`)
	assert.Contains(t, lines[0], "fencing_token=7")
	assert.Contains(t, lines[1], `level=INFO msg="setnxlock: recovered"`)
	assert.Contains(t, lines[2], `level=WARN msg="setnxlock: lost"`)
	assert.Contains(t, lines[2], `err="setnxlock: lock not held"`)
	assert.Equal(t, "unknown", EventKind(0).String())
}

func TestANilObserverIsRefused(t *testing.T) {
	b := newBackend(t, "miniredis", startMiniredis(t))
	_, err := New(b.client(t), WithObserver(nil))
	require.ErrorIs(t, err, ErrInvalidArgument)
}
