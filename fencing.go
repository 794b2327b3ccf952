package setnxlock

import "fmt"

// Fencing (H8): a holder that stalls past its lease may still act on the
// protected resource after the next holder has taken over. With
// WithFencing every acquisition draws a number from a counter in Redis, in
// the same transaction that wins the lock, so tokens strictly increase from
// one holder of a key to the next, including takeovers of crashed holders.
// The resource remembers the highest token it has seen and rejects lower
// ones.

// errFenceNotCounter is the error of an acquisition whose fence counter
// holds something INCR cannot count (H7); the counter is left untouched.
func errFenceNotCounter(counter string) error {
	return fmt.Errorf("%w: the fence counter %s is not an integer", ErrNotLockValue, counter)
}

// fenceCounter names the counter the fencing tokens of key are drawn from:
// FenceKey(key), or for a semaphore's permit the one counter of all its
// permits (Semaphore), so that tokens strictly increase across them.
func (l *Locker) fenceCounter(key string) string {
	if counter, ok := l.permitFences.Load(key); ok {
		return counter.(string)
	}
	return FenceKey(key)
}

// FencingToken returns the lock's fencing token, or 0 when the Locker was
// made without WithFencing. Tokens of successive holders of a key strictly
// increase; pass the token with every write to the protected resource and
// have it reject any token lower than one it has already accepted. A nil
// Lock has token 0.
func (k *Lock) FencingToken() int64 {
	if k == nil {
		return 0
	}
	return k.fencingToken
}
