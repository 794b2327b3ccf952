package setnxlock

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// The names of a key's own keys and channel, cut from one string for a
// release, are exactly the ones named alone, with a hash tag of the key's
// or the key made one.
func TestAKeysWakeChannelAndQueueNamedTogetherAreTheSame(t *testing.T) {
	for key, waiters := range map[string]string{
		"lock.k":        "{lock.k}.waiters",
		"{user42}.lock": "{user42}.lock.waiters",
		"{}.lock":       "{{}.lock}.waiters", // an empty tag is none
		"a}b{c":         "{a}b{c}.waiters",
		"":              "{}.waiters",
		"ключ{é}":       "ключ{é}.waiters",
	} {
		channel, queue := wakeChannelAndWaiters(key)
		assert.Equal(t, "setnxlock:released:"+key, channel, "%q", key)
		assert.Equal(t, WakeChannel(key), channel, "%q", key)
		assert.Equal(t, waiters, queue, "%q", key)
		assert.Equal(t, waitersKey(key), queue, "%q", key)
	}
}
