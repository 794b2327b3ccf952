package setnxlock

import (
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The scripted transport reads and writes the queue's encodings with the
// functions of lua/protocol.lua, given the encodings by appendProtocolArgs; the
// command transport with those of protocol.go. Both must agree on every
// member, well formed or not, and write the same bytes.
func TestBothTransportsShareTheQueuesEncodings(t *testing.T) {
	encode := redis.NewScript(protocolLua + `
local locker, token = queue.entry(ARGV[5])
return {locker or false, token or false, queue.channel('L1'), queue.payload('T1', '', 'lock.k'), queue.payload('T1', queue.provisionalEnd, 'lock.k'), queue.provisional('T1'), queue.net}`)
	members := []string{
		formatEntry("L1", "T1"), "L1:T1", ":T1", "L1:", "L1", "", "L1:T1:x", "L1::T1", "a:b", "L:" + newToken(),
	}
	onEachBackend(t, func(t *testing.T, b *backend) {
		now := b.clock.Now()
		for _, member := range members {
			reply, err := encode.Run(ctx, b.raw, nil, append(b.locker(t).appendProtocolArgs(nil, now), member)...).Slice()
			require.NoError(t, err)
			locker, token, ok := parseEntry(member)
			if ok {
				assert.Equal(t, []any{locker, token}, reply[:2], "entry %q", member)
			} else {
				assert.Equal(t, []any{nil, nil}, reply[:2], "not an entry: %q", member)
			}
			assert.Equal(t, handoffChannel("L1"), reply[2])
			assert.Equal(t, formatPayload("T1", "", "lock.k"), reply[3], "a wake-up")
			assert.Equal(t, formatPayload("T1", provisionalEnd(now), "lock.k"), reply[4], "a handoff")
			assert.Equal(t, provisionalValue(now, "T1"), reply[5])
			assert.Equal(t, fmt.Sprint(b.locker(t).provisionalNet().Milliseconds()), reply[6])
		}
	})
}

// Each encoding reads back what it wrote.
func TestTheQueuesEncodingsRoundTrip(t *testing.T) {
	token := newToken()
	locker, got, ok := parseEntry(formatEntry("locker-1", token))
	assert.True(t, ok)
	assert.Equal(t, []string{"locker-1", token}, []string{locker, got})

	for _, end := range []string{"", provisionalEnd(clockStart())} {
		got, gotEnd, key, ok := parsePayload(formatPayload(token, end, "{app}:lock:k"))
		assert.True(t, ok)
		assert.Equal(t, []string{token, end, "{app}:lock:k"}, []string{got, gotEnd, key}, "a key may hold the separator")
	}

	now := clockStart()
	value := provisionalValue(now, token)
	assert.Equal(t, provisionalEnd(now)+":"+token, value, "a handoff's end and token make its value")
	assert.Equal(t, token, tokenOf(value))
	end, err := parseExpiry(value)
	require.NoError(t, err)
	assert.True(t, now.Add(claimWindow).Equal(end), "ends claimWindow after the release: %v", end)
}

// No lease equals a provisional value (protocol.go: hand on only the exact
// provisional value): whatever the instant, a provisional value states its
// end claimWindow on with provisionalMark, which every reader reads as that
// instant, and no lease of ours, a restamped claim included, carries it.
func TestNoLeaseEqualsAProvisionalValue(t *testing.T) {
	start := clockStart()
	entry := &queueEntry{token: newToken()}
	for step := range 4000 {
		now := start.Add(time.Duration(step) * 250 * time.Microsecond)
		provisional := provisionalValue(now, entry.token)
		handed, err := parseExpiry(provisional)
		require.NoError(t, err)
		assert.Equal(t, now.Add(claimWindow).UnixMilli(), handed.UnixMilli(), "a provisional value at %s", now)
		assert.True(t, entry.carries(provisional), "a provisional value carries the wait's token")
		lease := TokenFormat.newStamp(now, claimWindow, entry.token, "")
		assert.NotEqual(t, provisional, lease.value, "a lease for the same instant, at %s", now)
		assert.NotContains(t, lease.value, provisionalMark+string(tokenSeparator), "a lease at %s", now)
		lease.queuedWait = entry.token
		claim, err := restamp(provisional, lease)
		require.NoError(t, err)
		assert.NotContains(t, claim.value, provisionalMark+string(tokenSeparator), "a claim restamped past a provisional value at %s", now)
		assert.True(t, entry.carries(claim.value), "a restamped claim carries the wait's token")
	}
}
