package interop

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/setnxlock/setnxlock/internal/redisproc"
)

// nodeDir holds the Node programs and their pinned packages.
const nodeDir = "node"

// The versions the tests are about; npm ci installs them from
// package-lock.json, and setup checks that it did.
var pinned = map[string]string{"redis-lock": "0.0.9", "redis": "3.1.2"}

// stampFile, inside node_modules, records a hash of the package.json and
// package-lock.json the installed packages came from, so editing either
// reinstalls them.
const stampFile = ".setnxlock-installed"

var (
	setupOnce sync.Once
	nodeBin   string
	setupSkip string // why the tests skip (or fail under CI)
	setupErr  error
)

// node returns the node binary once node/'s packages are installed (npm ci,
// when node_modules is missing or was installed from another package.json
// or package-lock.json). Without node or npm the test skips, or
// fails under CI=true, where skipping would let CI pass without the test.
// A failed install (offline, for instance) always fails.
func node(t *testing.T) string {
	t.Helper()
	setupOnce.Do(func() { nodeBin, setupSkip, setupErr = setupNode() })
	if setupSkip != "" {
		if os.Getenv("CI") == "true" {
			t.Fatal(setupSkip + " (CI=true: these tests must not be skipped)")
		}
		t.Skip(setupSkip)
	}
	if setupErr != nil {
		t.Fatal(setupErr)
	}
	return nodeBin
}

func setupNode() (bin, skip string, err error) {
	bin, err = exec.LookPath("node")
	if err != nil {
		return "", "node not found on PATH (install nodejs and npm, e.g. apt-get install nodejs npm)", nil
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		return "", "npm not found on PATH (install it, e.g. apt-get install npm)", nil
	}
	h := sha256.New()
	for _, f := range []string{"package.json", "package-lock.json"} {
		data, err := os.ReadFile(filepath.Join(nodeDir, f))
		if err != nil {
			return "", "", err
		}
		h.Write(data)
	}
	want := hex.EncodeToString(h.Sum(nil))
	stamp := filepath.Join(nodeDir, "node_modules", stampFile)
	if have, _ := os.ReadFile(stamp); strings.TrimSpace(string(have)) != want {
		cmd := exec.Command(npm, "ci", "--no-audit", "--no-fund", "--loglevel=error")
		cmd.Dir = nodeDir
		if out, err := cmd.CombinedOutput(); err != nil {
			return "", "", fmt.Errorf("npm ci in interop/node failed (is the npm registry reachable?): %v\n%s", err, out)
		}
		if err := os.WriteFile(stamp, []byte(want+"\n"), 0o644); err != nil {
			return "", "", err
		}
	}
	for name, version := range pinned {
		data, err := os.ReadFile(filepath.Join(nodeDir, "node_modules", name, "package.json"))
		if err != nil {
			return "", "", fmt.Errorf("after npm ci: %w", err)
		}
		var pkg struct{ Version string }
		if err := json.Unmarshal(data, &pkg); err != nil {
			return "", "", fmt.Errorf("%s/package.json: %w", name, err)
		}
		if pkg.Version != version {
			return "", "", fmt.Errorf("installed %s is %s, the tests are about %s", name, pkg.Version, version)
		}
	}
	return bin, "", nil
}

// nodeProc is one Node program run by a test. Its stdout is read line by
// line; it is killed and waited for when the test ends, whatever happened.
type nodeProc struct {
	t      *testing.T
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  chan string   // stdout, closed at EOF
	exited chan struct{} // closed once Wait has returned
	stderr *lockedWriter
	err    error // Wait's result, once exited is closed
}

// startNode runs `node <script> <json config>` in node/.
func startNode(t *testing.T, script string, config any) *nodeProc {
	t.Helper()
	arg, err := json.Marshal(config)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(node(t), script, string(arg))
	cmd.Dir = nodeDir
	redisproc.DieWithParent(cmd)
	p := &nodeProc{t: t, cmd: cmd, lines: make(chan string, 1024), exited: make(chan struct{}), stderr: &lockedWriter{}}
	cmd.Stderr = p.stderr
	if p.stdin, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		// Read everything before Wait, which closes the pipe.
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
		close(p.lines)
		p.err = cmd.Wait() // bounded: stdout is closed, so the program has ended
		close(p.exited)
	}()
	t.Cleanup(func() {
		p.kill()
		if t.Failed() {
			t.Logf("%s %s stderr:\n%s", script, arg, p.stderr)
		}
	})
	return p
}

// next returns the next stdout line, or fails the test when the program
// ends first or nothing comes within limit (a hang, not a measurement).
func (p *nodeProc) next(limit time.Duration) string {
	p.t.Helper()
	select {
	case line, ok := <-p.lines:
		if !ok {
			<-p.exited // bounded: stdout is closed, so the program has ended
			p.t.Fatalf("node program ended (%v) before the line the test waited for; stderr:\n%s", p.err, p.stderr)
		}
		return line
	case <-time.After(limit):
		p.t.Fatalf("node program printed nothing for %v; stderr:\n%s", limit, p.stderr)
	}
	return ""
}

// waitFor skips lines until one starts with prefix and returns it, with
// the lines skipped.
func (p *nodeProc) waitFor(prefix string, limit time.Duration) (string, []string) {
	p.t.Helper()
	var skipped []string
	for {
		line := p.next(limit)
		if strings.HasPrefix(line, prefix) {
			return line, skipped
		}
		skipped = append(skipped, line)
	}
}

// send writes one line to the program's stdin.
func (p *nodeProc) send(line string) {
	p.t.Helper()
	if _, err := io.WriteString(p.stdin, line+"\n"); err != nil {
		p.t.Fatal(err)
	}
}

// kill ends the program with SIGKILL, as a crash would, and waits for it.
func (p *nodeProc) kill() {
	_ = p.cmd.Process.Kill()
	for range p.lines { // drain, so the reader goroutine can finish
	}
	<-p.exited // bounded: killed
}

// wait waits for the program to finish on its own and fails the test if it
// did not exit cleanly.
func (p *nodeProc) wait(limit time.Duration) []string {
	p.t.Helper()
	var out []string
	deadline := time.After(limit)
	for {
		select {
		case line, ok := <-p.lines:
			if ok {
				out = append(out, line)
				continue
			}
			<-p.exited // bounded: stdout is closed, so the program has ended
			if p.err != nil {
				p.t.Fatalf("node program failed: %v; stderr:\n%s", p.err, p.stderr)
			}
			return out
		case <-deadline:
			p.t.Fatalf("node program still running after %v; stderr:\n%s", limit, p.stderr)
		}
	}
}

// lockedWriter collects a program's stderr: os/exec's copier goroutine
// writes it while the test may already be printing it.
type lockedWriter struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(b)
}

func (l *lockedWriter) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
