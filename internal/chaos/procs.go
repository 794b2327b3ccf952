package chaos

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// ClientPackage is the client program the harness builds and runs as OS
// processes.
const ClientPackage = "github.com/setnxlock/setnxlock/internal/chaos/cmd/chaosclient"

// OwnerCheckOffTag is the build tag that turns the library's owner check
// off (ownercheck_off.go); the owner-check broken-assumption run builds its
// client with it.
const OwnerCheckOffTag = "setnxlock_no_owner_check"

// BuildClient builds the client program into dir with the given build tags
// (none: "") and returns its path. It runs the go command found on the
// PATH (or $GO), from the current directory, which must be inside this
// module.
func BuildClient(dir, tags string) (string, error) {
	goBin := os.Getenv("GO")
	if goBin == "" {
		goBin = "go"
	}
	name := "chaosclient"
	if tags != "" {
		name += "-" + strings.ReplaceAll(tags, ",", "-")
	}
	out := filepath.Join(dir, name)
	args := []string{"build", "-o", out}
	if tags != "" {
		args = append(args, "-tags", tags)
	}
	cmd := exec.Command(goBin, append(args, ClientPackage)...)
	if output, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("chaos: go build %s: %w\n%s", ClientPackage, err, output)
	}
	return out, nil
}

// Args turns the configuration into the client program's flags.
func (c WorkerConfig) Args() []string {
	return []string{
		"-name", c.Name, "-redis", c.Redis, "-resource", c.Resource,
		"-keys", strings.Join(c.Keys, ","), "-seed", strconv.FormatUint(c.Seed, 10),
		"-offset", c.Offset.String(), "-ttl", c.TTL.String(), "-margin", c.Margin.String(),
		"-min-backoff", c.MinBackoff.String(), "-max-backoff", c.MaxBackoff.String(),
		"-read-timeout", c.ReadTimeout.String(), "-max-retries", strconv.Itoa(c.MaxRetries),
		"-long-hold", strconv.FormatFloat(c.LongHoldRate, 'g', -1, 64),
		"-no-scripts=" + strconv.FormatBool(c.NoScripts),
	}
}

// ParseWorkerArgs is the client program's side of Args.
func ParseWorkerArgs(args []string) (WorkerConfig, error) {
	var c WorkerConfig
	var keys string
	fs := flag.NewFlagSet("chaosclient", flag.ContinueOnError)
	fs.StringVar(&c.Name, "name", "", "client incarnation name")
	fs.StringVar(&c.Redis, "redis", "", "host:port of the fault proxy")
	fs.StringVar(&c.Resource, "resource", "", "unix socket of the harness's resource")
	fs.StringVar(&keys, "keys", "", "comma-separated lock keys")
	fs.Uint64Var(&c.Seed, "seed", 1, "the run's seed")
	fs.DurationVar(&c.Offset, "offset", 0, "this client's clock offset")
	fs.DurationVar(&c.TTL, "ttl", 200*time.Millisecond, "lease length")
	fs.DurationVar(&c.Margin, "margin", 0, "skew margin")
	fs.DurationVar(&c.MinBackoff, "min-backoff", time.Millisecond, "Acquire's first wait")
	fs.DurationVar(&c.MaxBackoff, "max-backoff", 20*time.Millisecond, "Acquire's longest wait")
	fs.DurationVar(&c.ReadTimeout, "read-timeout", 100*time.Millisecond, "go-redis read/write timeout")
	fs.IntVar(&c.MaxRetries, "max-retries", 0, "go-redis retries (-1: none)")
	fs.Float64Var(&c.LongHoldRate, "long-hold", 0, "share of critical sections that last the whole lease")
	fs.BoolVar(&c.NoScripts, "no-scripts", false, "only the classic commands, no EVAL")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if c.Name == "" || c.Redis == "" || c.Resource == "" || keys == "" {
		return c, fmt.Errorf("chaosclient: -name, -redis, -resource and -keys are required")
	}
	c.Keys = strings.Split(keys, ",")
	return c, nil
}

// proc is one running client process.
type proc struct {
	cmd    *exec.Cmd
	exited chan struct{} // closed once the process has been waited for
	err    error         // its exit status, once exited is closed
	stderr bytes.Buffer

	mu     sync.Mutex
	killed bool // by the harness: an exit by SIGKILL is expected
}

func startProc(bin string, cfg WorkerConfig) (*proc, error) {
	p := &proc{cmd: exec.Command(bin, cfg.Args()...), exited: make(chan struct{})}
	p.cmd.Stderr = &p.stderr
	if err := p.cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.exited)
	}()
	return p, nil
}

// kill sends SIGKILL, as a crash would. It does not wait.
func (p *proc) kill() {
	p.mu.Lock()
	p.killed = true
	p.mu.Unlock()
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
}

// pause stops the process with SIGSTOP for d, or until stop is closed,
// and continues it with SIGCONT.
func (p *proc) pause(d time.Duration, stop <-chan struct{}) {
	if p.cmd.Process.Signal(syscall.SIGSTOP) != nil {
		return
	}
	_ = sleepOrStop(d, stop)
	_ = p.cmd.Process.Signal(syscall.SIGCONT)
}

// unexpectedExit reports an exit the harness did not cause: a bug in the
// client program, which must fail the run.
func (p *proc) unexpectedExit() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.killed || p.err == nil {
		return nil
	}
	return fmt.Errorf("%w: %s", p.err, strings.TrimSpace(p.stderr.String()))
}
