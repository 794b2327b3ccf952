// Package interop tests setnxlock against real lock clients of other
// languages sharing keys with it on a real redis-server: npm redis-lock
// 0.0.9 on the redis 3.1.2 client, the Node programs in node/; and
// kvz/cronlock's release, command for command, with the script itself when
// CRONLOCK_SCRIPT points at a copy (make interop-cronlock).
//
// The package has no code of its own; its tests run with the rest of the
// module's (make test). They need node and npm on the PATH, and install
// node/'s pinned packages with npm ci on first use; without node or npm
// they skip, except under CI=true, where they fail.
package interop
