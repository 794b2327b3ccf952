package main

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// environment is what the report says about the machine and the software.
type environment struct {
	date       time.Time
	goVersion  string
	osArch     string
	kernel     string
	cpu        string
	cpus       int
	gomaxprocs int
	redis      string
	modules    map[string]string // module path → version, from the build info
	setnxlock  string            // the library's commit, "+ changes" when the tree is dirty
	took       time.Duration
}

// reportedModules are the dependency versions the report names.
var reportedModules = []string{
	"github.com/redis/go-redis/v9",
	"github.com/bsm/redislock",
	"github.com/go-redsync/redsync/v4",
	"gonum.org/v1/plot",
}

func collectEnvironment(ctx context.Context, admin *redis.Client) environment {
	env := environment{
		date: time.Now().UTC(), goVersion: runtime.Version(), osArch: runtime.GOOS + "/" + runtime.GOARCH,
		cpus: runtime.NumCPU(), gomaxprocs: runtime.GOMAXPROCS(0), redis: serverVersion(ctx, admin),
		modules: map[string]string{}, kernel: "unknown", cpu: "unknown", setnxlock: "unknown",
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		env.kernel = strings.TrimSpace(string(b))
	}
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if name, value, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(name) == "model name" {
				env.cpu = strings.TrimSpace(value)
				break
			}
		}
		_ = f.Close()
	}
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, dep := range info.Deps {
			env.modules[dep.Path] = dep.Version
		}
	}
	if out, err := exec.Command("git", "-C", "..", "rev-parse", "--short", "HEAD").Output(); err == nil {
		env.setnxlock = strings.TrimSpace(string(out))
		if st, err := exec.Command("git", "-C", "..", "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(st) > 0 {
			env.setnxlock += " + uncommitted changes"
		}
	}
	return env
}
