package harness

import (
	"context"
	"debug/buildinfo"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Peer is envoyproxy/ratelimit's service (src/service_cmd), built from its
// Go module by `make gateway-peer`, on a Redis of ours.
type Peer struct {
	Grpc    string
	Version string // the module version the binary was built from
	cmd     *exec.Cmd
	done    chan struct{}
}

// PeerBinary is $POLYLIMIT_GATEWAY_PEER, else target/gateway-peer/service_cmd.
func PeerBinary() string {
	if bin := os.Getenv("POLYLIMIT_GATEWAY_PEER"); bin != "" {
		return bin
	}
	target := os.Getenv("CARGO_TARGET_DIR")
	if target == "" {
		target = filepath.Join(Repo(), "target")
	}
	return filepath.Join(target, "gateway-peer", "service_cmd")
}

// StartPeer runs the peer with its YAML config (domain and descriptors) in a
// runtime directory of its own, statsd off, and waits until it answers.
func StartPeer(binary, configYAML, dir string, redis *Redis, env ...string) (*Peer, error) {
	info, err := buildinfo.ReadFile(binary)
	if err != nil {
		return nil, fmt.Errorf("envoyproxy/ratelimit not built (make gateway-peer): %w", err)
	}
	config := filepath.Join(dir, "ratelimit", "config")
	if err := os.MkdirAll(config, 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(config, "config.yaml"), []byte(configYAML), 0o644); err != nil {
		return nil, err
	}
	var ports [3]int
	for i := range ports {
		if ports[i], err = FreePort(); err != nil {
			return nil, err
		}
	}
	p := &Peer{Grpc: fmt.Sprintf("127.0.0.1:%d", ports[0]), Version: info.Main.Version, done: make(chan struct{})}
	p.cmd = exec.Command(binary)
	p.cmd.Env = append(os.Environ(),
		"GRPC_HOST=127.0.0.1", "GRPC_PORT="+strconv.Itoa(ports[0]),
		"HOST=127.0.0.1", "PORT="+strconv.Itoa(ports[1]),
		"DEBUG_HOST=127.0.0.1", "DEBUG_PORT="+strconv.Itoa(ports[2]),
		"USE_STATSD=false", "LOG_LEVEL=warn",
		"REDIS_SOCKET_TYPE=tcp", "REDIS_URL="+fmt.Sprintf("127.0.0.1:%d", redis.Port),
		"RUNTIME_ROOT="+dir, "RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_APPDIRECTORY=config", "RUNTIME_WATCH_ROOT=false")
	p.cmd.Env = append(p.cmd.Env, env...)
	log, err := os.Create(filepath.Join(dir, "peer.log"))
	if err != nil {
		return nil, err
	}
	p.cmd.Stdout, p.cmd.Stderr = log, log
	if err := p.cmd.Start(); err != nil {
		return nil, err
	}
	go func() { _ = p.cmd.Wait(); log.Close(); close(p.done) }()
	client, err := Dial(p.Grpc)
	if err != nil {
		p.Kill()
		return nil, err
	}
	defer client.Close()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-p.done:
			text, _ := os.ReadFile(filepath.Join(dir, "peer.log"))
			return nil, fmt.Errorf("envoyproxy/ratelimit exited at start:\n%s", text)
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err = client.ShouldRateLimit(ctx, "probe", 1, Descriptor(nil, Entry{"probe", "probe"}))
		cancel()
		if status.Code(err) != codes.Unavailable { // answered, whatever it said of the probe
			return p, nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	p.Kill()
	return nil, fmt.Errorf("envoyproxy/ratelimit did not answer on %s: %v", p.Grpc, err)
}

// Pid is the peer's process id.
func (p *Peer) Pid() int { return p.cmd.Process.Pid }

// Kill stops the peer by pid.
func (p *Peer) Kill() {
	_ = p.cmd.Process.Kill()
	<-p.done
}
