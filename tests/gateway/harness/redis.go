// Package harness starts the real parts the gateway tests and the benchmark
// run on: redis-server on a free loopback port, polylimit-server on port 0,
// and a gRPC client of Envoy's rate-limit service.
package harness

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// Redis is a real redis-server without persistence, stopped by pid.
type Redis struct {
	Port int
	cmd  *exec.Cmd
}

// FreePort is a loopback port nothing listens on now (for redis-server, which
// cannot report the port it bound).
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// StartRedis runs redis-server and waits until it answers PING.
func StartRedis() (*Redis, error) {
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	r := &Redis{Port: port}
	r.cmd = exec.Command("redis-server", "--port", fmt.Sprint(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--protected-mode", "no")
	if err := r.cmd.Start(); err != nil {
		return nil, fmt.Errorf("redis-server must be installed (make deps installs it): %w", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if reply, _ := r.Command("PING"); reply == "+PONG" {
			return r, nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	r.Kill()
	return nil, fmt.Errorf("redis-server on port %d did not answer PING", port)
}

// URL is the store URL of the rules file.
func (r *Redis) URL() string { return fmt.Sprintf("redis://127.0.0.1:%d", r.Port) }

// Pid is redis-server's process id.
func (r *Redis) Pid() int { return r.cmd.Process.Pid }

// Command sends one inline command and returns the first reply line.
func (r *Redis) Command(line string) (string, error) {
	c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", r.Port), time.Second)
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

// Pause SIGSTOPs the server and waits until the kernel reports it stopped:
// connections stay open, nothing answers.
func (r *Redis) Pause() error {
	if err := r.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		return err
	}
	return waitState(r.Pid(), "T")
}

// Resume SIGCONTs a paused server.
func (r *Redis) Resume() error { return r.cmd.Process.Signal(syscall.SIGCONT) }

// Kill stops the server by pid (SIGCONT first, in case it was paused).
func (r *Redis) Kill() {
	if r.cmd == nil || r.cmd.Process == nil {
		return
	}
	_ = r.cmd.Process.Signal(syscall.SIGCONT)
	_ = r.cmd.Process.Kill()
	_, _ = r.cmd.Process.Wait()
	r.cmd = nil
}

// waitState waits until /proc/<pid>/stat shows the state letter.
func waitState(pid int, state string) error {
	stat := fmt.Sprintf("/proc/%d/stat", pid)
	for i := 0; i < 1000; i++ {
		b, _ := os.ReadFile(stat)
		if i := strings.LastIndex(string(b), ") "); i >= 0 && strings.HasPrefix(string(b)[i+2:], state) {
			return nil
		}
		time.Sleep(time.Millisecond)
	}
	return fmt.Errorf("process %d did not reach state %s", pid, state)
}
