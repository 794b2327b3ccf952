package setnxlock

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/setnxlock/setnxlock/internal/await"
)

func TestManualClockMovesOnlyWhenTold(t *testing.T) {
	start := clockStart()
	c := NewManualClock(start)
	assert.Equal(t, start, c.Now())
	c.Advance(time.Second)
	assert.Equal(t, start.Add(time.Second), c.Now())
	c.Set(start.Add(-time.Hour))
	assert.Equal(t, start.Add(-time.Hour), c.Now())
}

func TestManualClockIsSafeForConcurrentUse(t *testing.T) {
	start := clockStart()
	c := NewManualClock(start)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 1000 {
				c.Advance(time.Millisecond)
				_ = c.Now()
			}
		}()
	}
	await.Group(t, &wg, "8 goroutines advancing the clock")
	assert.Equal(t, start.Add(8*time.Second), c.Now())
}

func TestSystemClockFollowsTheWallClock(t *testing.T) {
	before := time.Now()
	now := systemClock{}.Now()
	assert.False(t, now.Before(before))
	assert.False(t, now.After(time.Now()))
}

func TestManualClockAfterFiresOnlyWhenTheClockGetsThere(t *testing.T) {
	start := clockStart()
	c := NewManualClock(start)
	fired := c.After(time.Second)
	c.Advance(999 * time.Millisecond)
	select {
	case <-fired:
		t.Fatal("fired early")
	default:
	}
	c.Advance(time.Millisecond)
	assert.Equal(t, start.Add(time.Second), await.Recv(t, fired, "After(1s) firing once the clock got there"))
	assert.Equal(t, start.Add(time.Second), await.Recv(t, c.After(0), "a wait of zero firing at once"))
	at := c.waitUntil(start, nil) // an instant already passed
	assert.Equal(t, start.Add(time.Second), await.Recv(t, at, "a wait for a passed instant firing at once"))
}
