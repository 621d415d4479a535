package harness

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// Nginx is a real nginx (Debian's package) running tests/nginx/site.conf, the
// site docs/server.md shows, with only its addresses rewritten: in the
// foreground as this user from a temporary prefix, stopped by pid.
type Nginx struct {
	Port   int
	cmd    *exec.Cmd
	prefix string
	done   chan struct{}
}

// StartNginx runs the site in front of app (host:port), deciding through
// polylimit-server's HTTP address check.
func StartNginx(check, app string) (*Nginx, error) {
	site, err := os.ReadFile(filepath.Join(Repo(), "tests", "nginx", "site.conf"))
	if err != nil {
		return nil, err
	}
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	text := string(site)
	for _, r := range [][2]string{{"127.0.0.1:8080", check}, {"127.0.0.1:8000", app}, {"listen 80;", fmt.Sprintf("listen 127.0.0.1:%d;", port)}} {
		if !strings.Contains(text, r[0]) {
			return nil, fmt.Errorf("tests/nginx/site.conf lost %q", r[0])
		}
		text = strings.ReplaceAll(text, r[0], r[1])
	}
	prefix, err := os.MkdirTemp("", "polylimit-gateway-nginx-")
	if err != nil {
		return nil, err
	}
	var temps []string
	for _, kind := range []string{"client_body", "proxy", "fastcgi", "uwsgi", "scgi"} {
		temps = append(temps, fmt.Sprintf("    %s_temp_path %s/tmp/%s;", kind, prefix, kind))
	}
	conf := fmt.Sprintf(`daemon off;
master_process off;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log warn;
events { worker_connections 1024; }
http {
    access_log off;
%[2]s
    include %[1]s/site.conf;
}
`, prefix, strings.Join(temps, "\n"))
	if err := os.MkdirAll(filepath.Join(prefix, "tmp"), 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(prefix, "site.conf"), []byte(text), 0o644); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(prefix, "nginx.conf"), []byte(conf), 0o644); err != nil {
		return nil, err
	}
	binary, err := exec.LookPath("nginx")
	if err != nil {
		binary = "/usr/sbin/nginx"
	}
	n := &Nginx{Port: port, prefix: prefix, done: make(chan struct{})}
	n.cmd = exec.Command(binary, "-p", prefix, "-c", filepath.Join(prefix, "nginx.conf"), "-e", filepath.Join(prefix, "error.log"))
	if err := n.cmd.Start(); err != nil {
		os.RemoveAll(prefix)
		return nil, fmt.Errorf("nginx (make nginx installs it): %w", err)
	}
	go func() { _ = n.cmd.Wait(); close(n.done) }()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-n.done:
			log, _ := os.ReadFile(filepath.Join(prefix, "error.log"))
			os.RemoveAll(prefix)
			return nil, fmt.Errorf("nginx exited at start:\n%s", log)
		default:
		}
		if c, err := net.DialTimeout("tcp", n.Addr(), 200*time.Millisecond); err == nil {
			c.Close()
			return n, nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	n.Stop()
	return nil, fmt.Errorf("nginx did not listen on %s", n.Addr())
}

// Addr is nginx's host:port.
func (n *Nginx) Addr() string { return fmt.Sprintf("127.0.0.1:%d", n.Port) }

// Stop sends SIGTERM by pid (a fast shutdown) and removes the prefix.
func (n *Nginx) Stop() {
	_ = n.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-n.done:
	case <-time.After(5 * time.Second):
		_ = n.cmd.Process.Kill()
		<-n.done
	}
	os.RemoveAll(n.prefix)
}
