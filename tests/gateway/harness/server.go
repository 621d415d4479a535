package harness

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Repo is the checkout's root (this file is tests/gateway/harness/server.go).
func Repo() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..")
}

// ServerBinary is polylimit-server's path: $POLYLIMIT_GATEWAY_BIN, else the
// workspace's build of the profile (debug or release) under $CARGO_TARGET_DIR.
func ServerBinary(profile string) string {
	if bin := os.Getenv("POLYLIMIT_GATEWAY_BIN"); bin != "" {
		return bin
	}
	target := os.Getenv("CARGO_TARGET_DIR")
	if target == "" {
		target = filepath.Join(Repo(), "target")
	}
	return filepath.Join(target, profile, "polylimit-server")
}

// ServerOptions start one polylimit-server.
type ServerOptions struct {
	Binary string // default ServerBinary("debug")
	Rules  string // the rules file
	Grpc   string // listen address, default 127.0.0.1:0
	HTTP   string // listen address, default 127.0.0.1:0
	// TrustClientClock sets POLYLIMIT_SERVER_TRUST_CLIENT_CLOCK=1: the
	// x-polylimit-now-ms metadata sets each decision's clock.
	TrustClientClock bool
	Env              []string // more environment
}

// Server is a running polylimit-server; its stdout (JSON log lines) is kept.
type Server struct {
	Grpc, HTTP string // the bound addresses from the "listening" line
	cmd        *exec.Cmd
	done       chan struct{}
	mu         sync.Mutex
	log        []string
}

// StartServer runs polylimit-server and waits for its "listening" line.
func StartServer(o ServerOptions) (*Server, error) {
	if o.Binary == "" {
		o.Binary = ServerBinary("debug")
	}
	if o.Grpc == "" {
		o.Grpc = "127.0.0.1:0"
	}
	if o.HTTP == "" {
		o.HTTP = "127.0.0.1:0"
	}
	if _, err := os.Stat(o.Binary); err != nil {
		return nil, fmt.Errorf("polylimit-server not built (make rust-build): %w", err)
	}
	s := &Server{done: make(chan struct{})}
	s.cmd = exec.Command(o.Binary, "--rules", o.Rules, "--grpc", o.Grpc, "--http", o.HTTP)
	s.cmd.Env = append(os.Environ(), o.Env...)
	if o.TrustClientClock {
		s.cmd.Env = append(s.cmd.Env, "POLYLIMIT_SERVER_TRUST_CLIENT_CLOCK=1")
	}
	stdout, err := s.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	stderr, err := s.cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := s.cmd.Start(); err != nil {
		return nil, err
	}
	listening := make(chan [2]string, 1)
	go s.read(stdout, listening)
	go s.read(stderr, nil)
	go func() { _ = s.cmd.Wait(); close(s.done) }()
	select {
	case addrs := <-listening:
		s.Grpc, s.HTTP = addrs[0], addrs[1]
		return s, nil
	case <-s.done:
		return nil, fmt.Errorf("polylimit-server exited at start (%s):\n%s", s.cmd.ProcessState, s.Log())
	case <-time.After(60 * time.Second):
		s.Kill()
		return nil, fmt.Errorf("polylimit-server printed no listening line in 60 s:\n%s", s.Log())
	}
}

func (s *Server) read(r interface{ Read([]byte) (int, error) }, listening chan [2]string) {
	scan := bufio.NewScanner(r)
	scan.Buffer(make([]byte, 64<<10), 1<<20)
	for scan.Scan() {
		line := scan.Text()
		s.mu.Lock()
		s.log = append(s.log, line)
		s.mu.Unlock()
		if listening == nil {
			continue
		}
		var l struct{ Msg, Grpc, HTTP string }
		if json.Unmarshal([]byte(line), &l) == nil && l.Msg == "listening" && l.Grpc != "" {
			listening <- [2]string{l.Grpc, l.HTTP}
			listening = nil
		}
	}
}

// Log is everything the server printed so far.
func (s *Server) Log() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Join(s.log, "\n")
}

// Pid is the server's process id.
func (s *Server) Pid() int { return s.cmd.Process.Pid }

// Signal sends sig to the server.
func (s *Server) Signal(sig syscall.Signal) error { return s.cmd.Process.Signal(sig) }

// Exited is closed when the process has exited.
func (s *Server) Exited() <-chan struct{} { return s.done }

// ExitCode is the exit status once Exited is closed (-1 for a signal).
func (s *Server) ExitCode() int { return s.cmd.ProcessState.ExitCode() }

// Stop sends SIGTERM and waits up to 10 s, then kills.
func (s *Server) Stop() {
	select {
	case <-s.done:
		return
	default:
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
		s.Kill()
	}
}

// Kill SIGKILLs the server by pid and waits for it.
func (s *Server) Kill() {
	_ = s.cmd.Process.Kill()
	<-s.done
}

// Metrics is the server's /metrics text.
func (s *Server) Metrics() (string, error) {
	res, err := http.Get("http://" + s.HTTP + "/metrics")
	if err != nil {
		return "", err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err == nil && res.StatusCode != http.StatusOK {
		err = fmt.Errorf("/metrics: status %d", res.StatusCode)
	}
	return string(b), err
}

// WaitLog waits until the server has printed n lines whose msg is msg, and
// returns the last.
func (s *Server) WaitLog(msg string, n int, timeout time.Duration) (map[string]any, error) {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		s.mu.Lock()
		var found []map[string]any
		for _, line := range s.log {
			var l map[string]any
			if json.Unmarshal([]byte(line), &l) == nil && l["msg"] == msg {
				found = append(found, l)
			}
		}
		s.mu.Unlock()
		if len(found) >= n {
			return found[n-1], nil
		}
		select {
		case <-s.done:
			return nil, fmt.Errorf("the server exited (%s) before %d× %q:\n%s", s.cmd.ProcessState, n, msg, s.Log())
		case <-time.After(5 * time.Millisecond):
		}
	}
	return nil, fmt.Errorf("no %d× %q in the server's log in %v:\n%s", n, msg, timeout, s.Log())
}
