package setnxlock

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseExpiryReadsEveryClassicFormat(t *testing.T) {
	cases := []struct {
		value string
		want  time.Time
	}{
		{"900000000", time.Unix(900000000, 0)},                      // SETNX page: integer seconds
		{"900000000123", time.UnixMilli(900000000123)},              // redis-lock, jedis-lock: integer ms
		{"900000000.5", time.Unix(900000000, 500_000_000)},          // redis-py: float seconds
		{"900000000.123456789123", time.Unix(900000000, 123456789)}, // more digits than nanoseconds
		{"900000000123.9", time.UnixMilli(900000000123)},            // float ms: the fraction is dropped
		{"900000000123:TOKEN", time.UnixMilli(900000000123)},        // ours
		{"900000000 host-1", time.Unix(900000000, 0)},               // a suffix after a space
		{"900000000|x", time.Unix(900000000, 0)},
		{"0", time.Unix(0, 0)},
		{"99999999999", time.Unix(99999999999, 0)},         // the largest seconds value
		{"100000000000", time.UnixMilli(100000000000)},     // the smallest ms value
		{"99999999999999", time.UnixMilli(99999999999999)}, // the largest ms value
	}
	for _, c := range cases {
		got, err := parseExpiry(c.value)
		require.NoError(t, err, c.value)
		assert.True(t, c.want.Equal(got), "%q: want %v, got %v", c.value, c.want, got)
	}
}

func TestParseExpiryRejectsWhatIsNotALockValue(t *testing.T) {
	for _, value := range []string{
		"", " ", "abc", "-1", "+1", " 900000000", "900000000x", "900000000.", ".5",
		"1.2.3", "1e9", "0x10", "100000000000000", "9223372036854775808", "900000000\u00e9",
	} {
		_, err := parseExpiry(value)
		require.ErrorIs(t, err, ErrNotLockValue, "%q", value)
	}
}

func TestNotLockValueErrorQuotesAShortPrefix(t *testing.T) {
	_, err := parseExpiry(strings.Repeat("x", 10_000))
	require.ErrorIs(t, err, ErrNotLockValue)
	assert.Less(t, len(err.Error()), 200)
}

func TestFormattedValuesParseBack(t *testing.T) {
	expiry := time.UnixMilli(900000000123)
	value := formatValue(expiry, newToken(), "")
	got, err := parseExpiry(value)
	require.NoError(t, err)
	assert.True(t, expiry.Equal(got))
}

func TestExpiredIsInclusiveOfTheExpiryInstant(t *testing.T) {
	start := clockStart()
	assert.False(t, expired(start, start.Add(-time.Nanosecond)))
	assert.True(t, expired(start, start))
	assert.True(t, expired(start, start.Add(time.Nanosecond)))
}
