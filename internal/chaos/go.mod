module github.com/setnxlock/setnxlock/internal/chaos

go 1.26.8

replace github.com/setnxlock/setnxlock => ../..

require (
	github.com/redis/go-redis/v9 v9.23.0
	github.com/setnxlock/setnxlock v0.0.0-00010101000000-000000000000
	github.com/stretchr/testify v1.12.1
	go.uber.org/goleak v1.3.0
)

require (
	github.com/anishathalye/porcupine v1.3.1 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
	golang.org/x/sys v0.48.0 // indirect
)
