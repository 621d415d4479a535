package adaptertest

import (
	"fmt"
	"net"
	"os/exec"
	"testing"
	"time"
)

// Redis is a real redis-server on a free loopback port, without
// persistence, stopped by pid when the test ends.
type Redis struct {
	URL string
	cmd *exec.Cmd
}

// StartRedis starts a redis-server for t (`make deps` installs it).
func StartRedis(t testing.TB) *Redis {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	cmd := exec.Command("redis-server", "--port", fmt.Sprint(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--protected-mode", "no")
	if err := cmd.Start(); err != nil {
		t.Fatalf("redis-server must be installed (make deps installs it): %v", err)
	}
	r := &Redis{URL: fmt.Sprintf("redis://127.0.0.1:%d", port), cmd: cmd}
	t.Cleanup(r.Kill)
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), time.Second); err == nil {
			_ = c.SetDeadline(time.Now().Add(time.Second))
			_, _ = c.Write([]byte("PING\r\n"))
			buf := make([]byte, 7)
			n, _ := c.Read(buf)
			c.Close()
			if string(buf[:n]) == "+PONG\r\n" {
				return r
			}
		}
	}
	t.Fatalf("redis-server on port %d did not answer PING", port)
	return nil
}

// Kill stops the server by pid; the store it served is then down.
func (r *Redis) Kill() {
	if r.cmd == nil {
		return
	}
	_ = r.cmd.Process.Kill()
	_, _ = r.cmd.Process.Wait()
	r.cmd = nil
}

// Stores are the stores every adapter test plays on: memory, and a real Redis.
func Stores(t testing.TB) map[string]string {
	return map[string]string{"memory": "memory", "redis": StartRedis(t).URL}
}
