package polylimit

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// redisServer is a real redis-server on a free loopback port, without
// persistence, stopped by pid when the test ends.
type redisServer struct {
	t    testing.TB
	port int
	cmd  *exec.Cmd
}

func freePort(t testing.TB) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func startRedis(t testing.TB) *redisServer {
	t.Helper()
	s := &redisServer{t: t, port: freePort(t)}
	s.spawn()
	t.Cleanup(s.kill)
	return s
}

func (s *redisServer) spawn() {
	s.t.Helper()
	s.cmd = exec.Command("redis-server", "--port", fmt.Sprint(s.port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--protected-mode", "no")
	if err := s.cmd.Start(); err != nil {
		s.t.Fatalf("redis-server must be installed (make deps installs it): %v", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if reply, _ := s.command("PING"); reply == "+PONG" {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.t.Fatalf("redis-server on port %d did not answer PING", s.port)
}

func (s *redisServer) url() string { return fmt.Sprintf("redis://127.0.0.1:%d", s.port) }

// command sends one inline command and returns the first reply line.
func (s *redisServer) command(line string) (string, error) {
	c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", s.port), time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write([]byte(line + "\r\n")); err != nil {
		return "", err
	}
	reply, err := bufio.NewReader(c).ReadString('\n')
	return strings.TrimRight(reply, "\r\n"), err
}

func (s *redisServer) signal(sig syscall.Signal) {
	if s.cmd != nil && s.cmd.Process != nil {
		_ = s.cmd.Process.Signal(sig)
	}
}

// kill stops the server by pid (SIGCONT first, in case it was paused).
func (s *redisServer) kill() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	s.signal(syscall.SIGCONT)
	_ = s.cmd.Process.Kill()
	_, _ = s.cmd.Process.Wait()
	s.cmd = nil
}

// pause SIGSTOPs the server: connections stay open, nothing answers.
func (s *redisServer) pause() {
	s.signal(syscall.SIGSTOP)
	stat := fmt.Sprintf("/proc/%d/stat", s.cmd.Process.Pid)
	for i := 0; i < 500; i++ {
		b, _ := os.ReadFile(stat)
		if i := strings.LastIndex(string(b), ") "); i >= 0 && strings.HasPrefix(string(b)[i+2:], "T") {
			return
		}
		time.Sleep(time.Millisecond)
	}
	s.t.Fatal("redis-server did not stop")
}

// startCluster starts a real 6-node Redis Cluster with the shared harness
// (tests/topology/redis_topology.py) and returns its store URL; closing the
// harness's stdin when the test ends stops every server it started.
func startCluster(t testing.TB) string {
	t.Helper()
	cmd := exec.Command("python3", "../tests/topology/redis_topology.py", "cluster")
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("the cluster harness: %v", err)
	}
	t.Cleanup(func() {
		stdin.Close()
		_ = cmd.Wait()
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	var described struct {
		URL string `json:"url"`
	}
	if err != nil || json.Unmarshal([]byte(line), &described) != nil || described.URL == "" {
		t.Fatalf("the cluster harness did not start: %v %q", err, line)
	}
	return described.URL
}
