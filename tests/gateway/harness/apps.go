package harness

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// App is one of the example apps (examples/) on a free loopback port.
type App struct {
	Name string
	Port int
	cmd  *exec.Cmd
	log  string
	done chan struct{}
}

func targetDir() string {
	if dir := os.Getenv("CARGO_TARGET_DIR"); dir != "" {
		return dir
	}
	return filepath.Join(Repo(), "target")
}

// StartApp runs the example app "fastapi" (on $POLYLIMIT_GATEWAY_PYTHON, else
// the checkout's .venv) or "go" (target/examples/go-example) on the rules
// file and waits until it listens.
func StartApp(name, rules string, env ...string) (*App, error) {
	var cmd *exec.Cmd
	switch name {
	case "fastapi":
		python := os.Getenv("POLYLIMIT_GATEWAY_PYTHON")
		if python == "" {
			python = filepath.Join(Repo(), ".venv", "bin", "python")
		}
		cmd = exec.Command(python, "app.py")
		cmd.Dir = filepath.Join(Repo(), "examples", "fastapi")
	case "go":
		cmd = exec.Command(filepath.Join(targetDir(), "examples", "go-example"))
		cmd.Dir = filepath.Join(Repo(), "examples", "go")
	default:
		return nil, fmt.Errorf("no example app %q", name)
	}
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "polylimit-gateway-app-")
	if err != nil {
		return nil, err
	}
	a := &App{Name: name, Port: port, cmd: cmd, log: filepath.Join(dir, name+".log"), done: make(chan struct{})}
	out, err := os.Create(a.log)
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.Env = append(os.Environ(), append([]string{"PORT=" + strconv.Itoa(port), "POLYLIMIT_RULES=" + rules}, env...)...)
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("%s example (make examples-go python-build): %w", name, err)
	}
	go func() { _ = cmd.Wait(); out.Close(); close(a.done) }()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-a.done:
			return nil, fmt.Errorf("%s example exited at start:\n%s", name, a.Log())
		default:
		}
		if c, err := net.DialTimeout("tcp", a.Addr(), 200*time.Millisecond); err == nil {
			c.Close()
			return a, nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	a.Stop()
	return nil, fmt.Errorf("%s example did not listen on %s:\n%s", name, a.Addr(), a.Log())
}

// Addr is the app's host:port.
func (a *App) Addr() string { return fmt.Sprintf("127.0.0.1:%d", a.Port) }

// Log is what the app printed.
func (a *App) Log() string {
	b, _ := os.ReadFile(a.log)
	return string(b)
}

// Stop sends SIGTERM by pid, then kills after 5 s.
func (a *App) Stop() {
	_ = a.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-a.done:
	case <-time.After(5 * time.Second):
		_ = a.cmd.Process.Kill()
		<-a.done
	}
	os.RemoveAll(filepath.Dir(a.log))
}
