package setnxlock

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestManualClockMovesOnlyWhenTold(t *testing.T) {
	c := NewManualClock(epoch)
	assert.Equal(t, epoch, c.Now())
	c.Advance(time.Second)
	assert.Equal(t, epoch.Add(time.Second), c.Now())
	c.Set(epoch.Add(-time.Hour))
	assert.Equal(t, epoch.Add(-time.Hour), c.Now())
}

func TestManualClockIsSafeForConcurrentUse(t *testing.T) {
	c := NewManualClock(epoch)
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
	wg.Wait()
	assert.Equal(t, epoch.Add(8*time.Second), c.Now())
}

func TestSystemClockFollowsTheWallClock(t *testing.T) {
	before := time.Now()
	now := systemClock{}.Now()
	assert.False(t, now.Before(before))
	assert.False(t, now.After(time.Now()))
}

func TestManualClockAfterFiresOnlyWhenTheClockGetsThere(t *testing.T) {
	c := NewManualClock(epoch)
	fired := c.After(time.Second)
	c.Advance(999 * time.Millisecond)
	select {
	case <-fired:
		t.Fatal("fired early")
	default:
	}
	c.Advance(time.Millisecond)
	assert.Equal(t, epoch.Add(time.Second), <-fired)
	assert.Equal(t, epoch.Add(time.Second), <-c.After(0), "a wait of zero fires at once")
	at := c.waitUntil(epoch) // an instant already passed
	assert.Equal(t, epoch.Add(time.Second), <-at)
}
