package main

// The exit statuses of setnxlock, as issue 14 states them; the README's
// "Command line" section has the table. run otherwise exits with its
// command's own status.
const (
	exitOK = 0
	// exitConflict is run's default for -n and -w giving up (-E changes it),
	// as flock(1).
	exitConflict = 1
	// exitFree: status found no live lease; release --force found nothing
	// to delete.
	exitFree = 3
	// exitForeign: the key holds something that is not a lock value (H7).
	exitForeign = 4
	// exitUsage: bad usage; nothing was sent to Redis (EX_USAGE).
	exitUsage = 64
	// exitForeignKey: run found the key holding something that is not a
	// lock value, and left it alone (EX_DATAERR).
	exitForeignKey = 65
	// exitPermitsMismatch: run --permits N found another count recorded
	// for the semaphore (ErrPermitsMismatch), and wrote nothing (EX_CONFIG).
	exitPermitsMismatch = 78
	// exitUnavailable: Redis could not be reached, or refused, at the first
	// attempt (EX_UNAVAILABLE).
	exitUnavailable = 69
	// exitCannotExecute and exitNotFound: the command could not be started,
	// as the shells report it.
	exitCannotExecute = 126
	exitNotFound      = 127
	// exitLost: the lease was lost while the command ran (EX_TEMPFAIL).
	exitLost = 75
	// exitMaxRuntime: --max-runtime ran out, as timeout(1).
	exitMaxRuntime = 124
	// exitSignalBase plus N: the command died of signal N, or setnxlock was
	// interrupted by signal N while still waiting.
	exitSignalBase = 128
)
