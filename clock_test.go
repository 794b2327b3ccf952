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
