// Package setnxlock implements Redis locks with the classic algorithm of the
// Redis SETNX command page, done as safely as that algorithm allows.
//
// A lock is a key whose value is the expiry of the holder's lease:
//
//  1. SETNX key <expiry>: 1 means the lock is ours.
//  2. Otherwise GET key. A live expiry means someone else holds it.
//  3. An expired one means its holder crashed: GETSET key <new expiry>, and
//     the lock is ours only if the value GETSET returned was still expired.
//     The GETSET runs inside WATCH/MULTI/EXEC on the expired value, so of
//     the clients racing for it only the winner's executes and a loser never
//     overwrites the winner's value.
//
// Release deletes the key only while it still holds our exact value, in a
// WATCH/MULTI/EXEC transaction. Nothing newer than SETNX, GET, GETSET, DEL
// and WATCH/MULTI/EXEC is needed, so it works where scripting is disabled,
// on old servers and on Redis-protocol servers, and it can share keys with
// services in other languages that lock this way: it reads every classic
// value format (Unix seconds or milliseconds, integer or decimal).
//
// Values we write are "<expiry unix ms>:<random owner token>", which makes
// ownership exact. The comments name the hazards H1–H9 of the design
// document where the code handles them.
//
// Safety rests on clocks: every process locking the same key must agree on
// the time to within a bound far below the lease length, because an expired
// lease is judged by the reader's clock. A holder that pauses past its lease
// (GC, swap) may find its lock taken over; keep critical sections well
// inside the TTL.
package setnxlock
