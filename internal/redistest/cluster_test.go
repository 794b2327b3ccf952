package redistest

import (
	"context"
	"fmt"
	"net"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/setnxlock/setnxlock/internal/redisproc"
)

func TestClusterSpreadsKeysOverEveryMasterAndStopsWithItsTest(t *testing.T) {
	var addrs []string
	t.Run("serves every master through a cluster client", func(t *testing.T) {
		addrs = StartCluster(t, 3).Addrs()
		servesEveryMaster(t, addrs)
	})
	require.Len(t, addrs, 3)
	for _, addr := range addrs {
		assert.Error(t, redisproc.Ping(addr), "node %s outlived its test", addr)
	}
}

func servesEveryMaster(t *testing.T, addrs []string) {
	ctx := context.Background()
	require.Len(t, addrs, 3)
	client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs[:1], MaxRetries: -1})
	t.Cleanup(func() { _ = client.Close() })
	owned := map[string]int{}
	slots, err := client.Do(ctx, "cluster", "slots").Slice() // ClusterSlots is deprecated, ClusterShards needs Redis 7
	require.NoError(t, err)
	for _, s := range slots {
		s := s.([]any)
		require.Len(t, s, 3, "masters only, no replicas")
		master := s[2].([]any)
		addr := net.JoinHostPort(master[0].(string), fmt.Sprint(master[1]))
		owned[addr] += int(s[1].(int64) - s[0].(int64) + 1)
	}
	assert.Equal(t, map[string]int{addrs[0]: 5461, addrs[1]: 5461, addrs[2]: 5462}, owned,
		"the slots are split in equal ranges, in the order of Addrs")

	// Through one seed address the client finds every master.
	for i := range 30 {
		key := fmt.Sprintf("key-%d", i)
		require.NoError(t, client.Set(ctx, key, i, 0).Err())
	}
	var perNode []int64
	for _, addr := range addrs {
		node := redis.NewClient(&redis.Options{Addr: addr})
		n, err := node.DBSize(ctx).Result()
		_ = node.Close()
		require.NoError(t, err)
		perNode = append(perNode, n)
	}
	assert.EqualValues(t, 30, perNode[0]+perNode[1]+perNode[2])
	for i, n := range perNode {
		assert.NotZero(t, n, "node %s holds none of 30 keys", addrs[i])
	}
}
