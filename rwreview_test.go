package setnxlock

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// Review 27: garbage at the readers' set (H7). The reader transaction's
// EXEC runs SET and PEXPIRE before its SADD fails on a key that is not a
// set: the reader must be refused, the garbage left as it was, and no
// reader key left behind (it would be a lease nobody holds, unlisted).
func TestRWLockReaderRefusedByGarbageReadersSetLeavesNoReaderKey(t *testing.T) {
	onEachPath(t, func(t *testing.T, b *backend, p lockPath) {
		rw := rwOf(t, b.locker(t, p.opt), "doc")
		b.set(t, ReadersKey("doc"), "garbage")
		_, err := rw.TryRLock(ctx)
		assert.Error(t, err, "a reader was admitted beside a readers' set that is not a set")
		assert.Equal(t, "garbage", b.value(t, ReadersKey("doc")))
		keys, kerr := b.raw.Keys(ctx, ReaderKey("doc", "*")).Result()
		assert.NoError(t, kerr)
		assert.Empty(t, keys, "the refused reader left its key behind")
		_, err = rw.TryLock(ctx)
		assert.ErrorIs(t, err, ErrNotLockValue, "a writer drained past a readers' set it cannot read")
		assert.Equal(t, "<missing>", b.value(t, WriterKey("doc")), "the blocked writer gave its key back")
	})
}
