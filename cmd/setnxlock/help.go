package main

// The help texts. Flag descriptions come from the flag sets; these say
// what the commands do, with examples.

const mainHelp = `setnxlock: Redis locks for scripts and cron, across machines

Usage:
  setnxlock run [flags] KEY [--] COMMAND [ARG...] run COMMAND while holding the lock KEY
  setnxlock run [flags] KEY -c 'shell command'    the same, with /bin/sh -c
  setnxlock run --permits N [flags] NAME [--] COMMAND [ARG...]
                                                  run COMMAND under one of N permits of the semaphore NAME
  setnxlock status [--json] KEY                   what KEY holds: exit 0 held, 3 free, 4 not a lock
  setnxlock status [--json] KEY KEY...            each KEY, and whether one group lock holds them all: exit 0 all held
  setnxlock status [--json] --rw NAME             a read/write lock's writer and readers: exit 0 held, 3 free
  setnxlock status [--json] --match PATTERN       the lock keys that match: exit 0 if any is held, 3 if none
  setnxlock release --force KEY                   delete KEY whoever holds it: exit 0, or 3 if nothing
  setnxlock semaphore status [--json] NAME        a semaphore's count, holders and waiters: exit 0 a permit is held, 3 none
  setnxlock semaphore resize NAME N               record N as its count (an operator's act); prints the old and new
  setnxlock version                               (also -V)

Every command takes --url URL (env SETNXLOCK_URL). 'setnxlock run --help' has
the flags of run and its exit statuses.

` + urlHelp + `

Examples:
  # cron, on every machine: at most one report every 5 minutes across the fleet
  */5 * * * * setnxlock run -n --min-hold 1m nightly-report -- /usr/local/bin/report
  setnxlock run -w 2.5 deploy -- ./deploy.sh production
  # at most 4 GPU jobs at once across the fleet
  setnxlock run --permits 4 gpu -- ./train.sh
  setnxlock status --json --url rediss://ops:secret@redis.internal:6380/0 nightly-report
`

const runHelp = `Usage:
  setnxlock run [flags] KEY [flags] [--] COMMAND [ARG...]
  setnxlock run [flags] KEY [flags] -c 'shell command'
  setnxlock run [flags] -- -KEY [--] COMMAND [ARG...]   a KEY that begins with '-'

Takes the lock KEY (waiting for it unless -n or -w says otherwise), runs
COMMAND in a process group of its own while renewing the lease every TTL/3,
then releases the lock once no process of that group runs. Flags may come
before or after KEY; the first argument after KEY that is not a flag begins
COMMAND, and everything from there on is the command's. The command's
environment gets SETNXLOCK_KEY, SETNXLOCK_EXPIRES_AT (RFC 3339, the lease's
end at start) and, with --fencing, SETNXLOCK_FENCING_TOKEN.

With --permits N, KEY names a semaphore of N permits, and the command runs
under one of them: up to N runs of KEY hold a permit at once, and the rest
wait (or, with -n or -w, give up) as for a lock. A permit is a lock key of
its own ({KEY}.permit.<i>), kept, lost and released as the lock is; the
command's SETNXLOCK_KEY is the permit's key, SETNXLOCK_SEMAPHORE is KEY.
N is recorded in Redis by the first run; every run of KEY must give the
same N (exit 78 otherwise, nothing written): 'setnxlock semaphore resize'
changes it.

SIGINT, SIGTERM, SIGHUP and SIGQUIT are forwarded to the command's process
group; while still waiting they end the wait, leaving nothing in Redis. A
SIGHUP or SIGINT ignored when setnxlock started (nohup, trap '' HUP, a
script's background job) stays ignored, for the command too.

The command's process group is gone by the end of the lease by this
machine's clock: if no renewal has been confirmed by then, it gets SIGTERM
early enough for the SIGKILL after --kill-grace to land before the lease
ends (the grace is cut to TTL/3 minus a margin for that), and run exits 75.
A loss Redis reports (the key overwritten or deleted) and --max-runtime
also send SIGTERM, then SIGKILL after --kill-grace. When COMMAND exits,
the lock stays held (renewed) until the processes it left in its group
exit, as flock(1)'s does while they keep its descriptor; --kill-descendants
kills them instead. A process that leaves the group (setsid, setpgid) is
neither waited for nor killed. If setnxlock itself is killed, the command
gets SIGKILL (Linux) and the lock ends with its lease.

From flock(1): -n, -w, -E, -c, -x (the only mode) and -V carry over;
-s (shared; --permits N is setnxlock's way), -u, -o, -F and the file-descriptor form
mean nothing for a Redis key and are refused.

Flags:
%s
Exit status:
  the command's own      it ran and exited
  128+N                  it died of signal N; or setnxlock got signal N while waiting
  1 (-E N)               -n or -w gave up: the lock (every permit) is held by someone else
  75                     the lease was lost, or ending unrenewed, while the command ran (it was killed)
  124                    --max-runtime ran out (the command was killed)
  69                     Redis unreachable, or refusing, at the first attempt
  65                     KEY holds something that is not a lock value (left alone); with
                         --permits, every permit key does, or the recorded count is not a number
  78                     --permits N differs from the count recorded for the semaphore (nothing written)
  126, 127               COMMAND could not be executed, or was not found
  64                     bad usage; nothing was sent to Redis

Examples:
  setnxlock run -n --min-hold 1m nightly-report -- /usr/local/bin/report
  setnxlock run -w 30s --ttl 10s backup -c 'pg_dump app | gzip > /backup/app.gz'
  setnxlock run --fencing migrate -- sh -c 'migrate --fence "$SETNXLOCK_FENCING_TOKEN"'
  setnxlock run --format seconds -E 0 cronjob -- ./job   # shares keys with kvz/cronlock
  setnxlock run --permits 4 -w 10m gpu -- ./train.sh     # at most 4 at once
`

const statusHelp = `Usage:
  setnxlock status [--json] KEY
  setnxlock status [--json] KEY KEY...
  setnxlock status [--json] --rw NAME
  setnxlock status [--json] --match PATTERN

Says what KEY holds, writing nothing: a live lease, an expired one, nothing,
or something that is not a lock value, and who holds it (the holder's
identity, written after the owner token: host name and process id unless
the holder chose another). --json prints one object:
  {"key":..., "held":bool, "expires_at":RFC 3339 or null,
   "format":"token"|"millis"|"seconds"|"float"|"foreign"|null,
   "waiters":N, "value":the stored string or null,
   "identity":who holds it, or null when the value says not}
Exit status: 0 held, 3 free (missing, or a lease that has ended), 4 not a
lock value, 69 Redis unreachable, 64 bad usage.

With --match, it lists every key that matches PATTERN (glob-style, as
Redis's SCAN MATCH: quote it from the shell), sorted, one line each, or
with --json one array of those objects; the keys setnxlock keeps beside a
lock (its queue, fence counter, release marker) are left out. It uses SCAN,
never KEYS, so a large database is walked without blocking Redis. Exit
status: 0 some key is held, 3 none is (or nothing matches), 69 Redis
unreachable, 64 bad usage.

With several KEYs (the keys of a group lock, Locker.AcquireMany), it says
what each holds, one line each, and whether one lease holds them all (a
group writes one value to every key); --json prints
  {"keys":[one object per KEY], "one_holder":bool}
Exit status: 0 every key is held, 4 one is not a lock value, else 3.

With --rw, NAME is a read/write lock (Locker.RWLock): it reads its writer
key (held while a writer holds it or waits for the readers before it, with
its queue of waiting readers and writers) and its live readers; --json
prints {"name":..., "writer":object, "readers":[objects], "foreign":[keys]}.
Exit status: 0 a writer or a reader holds it, 4 one of its keys is not a
lock value, else 3.

Flags:
%s
Examples:
  setnxlock status --json nightly-report
  setnxlock status '{order7}.stock' '{order7}.payment'
  setnxlock status --rw prices
  setnxlock status --match 'lock.*'
`

const releaseHelp = `Usage:
  setnxlock release --force KEY

Deletes the lock KEY whoever holds it, and prints what it deleted. The
holder is not told: a setnxlock run holding it notices at its next renewal,
kills its command and exits 75. A key that holds something that is not a
lock value is left alone. The fencing counter is kept.
Exit status: 0 deleted, 3 nothing to delete, 4 not a lock value (left
alone), 69 Redis unreachable, 64 bad usage (--force is required).

Flags:
%s
Example:
  setnxlock release --force nightly-report
`

const semaphoreHelp = `Usage:
  setnxlock semaphore status [--json] NAME
  setnxlock semaphore resize NAME N

A semaphore of N permits is what 'setnxlock run --permits N NAME' runs
under: N lock keys, {NAME}.permit.0 to {NAME}.permit.<N-1>, and its count
recorded at {NAME}.permits by the first run. 'status' reads it, writing
nothing; 'resize' records another count. Each has --help.
`

const semaphoreStatusHelp = `Usage:
  setnxlock semaphore status [--json] NAME

Says, writing nothing, the semaphore NAME's recorded count of permits, each
live permit (its key, the end of its lease and who holds it, as status
says a key), the permit keys that hold something that is not a lock value
(skipped by runs), and how many runs wait for a permit. After a shrink,
permits past the new count are shown while they live. --json prints one
object:
  {"name":..., "permits":N or null (no count recorded yet), "held":N,
   "holders":[status --json's objects], "foreign":[keys], "waiters":N}
Exit status: 0 a permit is held, 3 none is, 4 none is and a permit key
holds something that is not a lock value, or the count is not a number,
69 Redis unreachable, 64 bad usage.

Flags:
%s
Example:
  setnxlock semaphore status --json gpu
`

const semaphoreResizeHelp = `Usage:
  setnxlock semaphore resize NAME N

Records N as the semaphore NAME's count of permits, whatever was recorded,
and prints the old count and the new. It is an operator's act: every run
--permits of NAME that gives another count is then refused (exit 78) until
it gives N. Shrinking never revokes a live permit: holders of permits past
N keep them until they are released or their leases end (it says how many),
and no run takes those permits again; until then more than N may run. A
run that read the old count just before may still start on it. A count
that is not a number is left alone (exit 4).
Exit status: 0 recorded, 4 the count holds something that is not a number,
69 Redis unreachable, 64 bad usage (N must be at least 1).

Flags:
%s
Example:
  setnxlock semaphore resize gpu 8
`
