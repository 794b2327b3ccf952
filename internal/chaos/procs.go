package chaos

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/setnxlock/setnxlock/internal/redisproc"
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

// Args turns the configuration into the client program's arguments: one
// flag carrying it as JSON.
func (c WorkerConfig) Args() []string {
	data, err := json.Marshal(c)
	if err != nil {
		panic(err) // a struct of strings, numbers and booleans always marshals
	}
	return []string{"-config", string(data)}
}

// ParseWorkerArgs is the client program's side of Args.
func ParseWorkerArgs(args []string) (WorkerConfig, error) {
	var c WorkerConfig
	var config string
	fs := flag.NewFlagSet("chaosclient", flag.ContinueOnError)
	fs.StringVar(&config, "config", "", "the client's configuration, as JSON (WorkerConfig)")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if err := json.Unmarshal([]byte(config), &c); err != nil {
		return c, fmt.Errorf("chaosclient: -config: %w", err)
	}
	if c.Name == "" || len(c.Redis) == 0 || c.Resource == "" || len(c.Keys) == 0 || c.Loops < 1 {
		return c, fmt.Errorf("chaosclient: the configuration needs a name, servers, the resource, keys and loops")
	}
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
	redisproc.DieWithParent(p.cmd) // no client outlives a harness killed mid-run
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
