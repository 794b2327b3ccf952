package main

import (
	"testing"

	"github.com/redis/go-redis/v9"
)

// Every scheme's client honours context deadlines (H11): go-redis's URL
// parsers leave ContextTimeoutEnabled off, and a renewal would then wait
// out the read timeout and retries past the lease's end.
func TestEveryClientHonoursContextDeadlines(t *testing.T) {
	t.Parallel()
	for _, raw := range []string{
		"redis://127.0.0.1:1/0",
		"rediss://127.0.0.1:1/0",
		"unix:///nonexistent/redis.sock",
		"redis+sentinel://127.0.0.1:1/0?master_name=m",
		"redis+cluster://127.0.0.1:1",
	} {
		client, err := newClient(raw)
		if err != nil {
			t.Fatalf("%s: %v", raw, err)
		}
		var enabled bool
		switch c := client.(type) {
		case *redis.Client:
			enabled = c.Options().ContextTimeoutEnabled
		case *redis.ClusterClient:
			enabled = c.Options().ContextTimeoutEnabled
		default:
			t.Fatalf("%s: a %T", raw, client)
		}
		_ = client.Close()
		if !enabled {
			t.Errorf("%s: ContextTimeoutEnabled is off", raw)
		}
	}
}
