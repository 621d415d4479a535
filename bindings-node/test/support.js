'use strict';
// Test helpers: a real redis-server on a free loopback port (no persistence,
// waited for with PING, killed by pid), and the conformance vector files.
const { spawn } = require('node:child_process');
const fs = require('node:fs');
const net = require('node:net');
const path = require('node:path');

function freePort() {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.unref();
    srv.on('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
  });
}

/** Sends one inline command; resolves to the raw reply (or null). */
function command(port, line) {
  return new Promise((resolve) => {
    const sock = net.connect(port, '127.0.0.1');
    let data = '';
    const done = (v) => {
      sock.destroy();
      resolve(v);
    };
    sock.setTimeout(2000, () => done(null));
    sock.on('error', () => done(null));
    sock.on('connect', () => sock.write(`${line}\r\n`));
    sock.on('data', (chunk) => {
      data += chunk;
      if (data.endsWith('\r\n')) done(data);
    });
  });
}

class RedisServer {
  static async start() {
    const server = new RedisServer(await freePort());
    await server.spawn();
    return server;
  }

  constructor(port) {
    this.port = port;
    this.child = null;
  }

  get url() {
    return `redis://127.0.0.1:${this.port}`;
  }

  async spawn() {
    this.child = spawn(
      'redis-server',
      [
        '--port', String(this.port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--protected-mode', 'no',
        '--enable-debug-command', 'local', // DEBUG SLEEP: a server busy past a call's timeout
      ],
      { stdio: 'ignore' },
    );
    const deadline = Date.now() + 10000;
    while (Date.now() < deadline) {
      if ((await command(this.port, 'PING')) === '+PONG\r\n') return;
      await new Promise((r) => setTimeout(r, 20));
    }
    throw new Error(`redis-server on port ${this.port} did not answer PING`);
  }

  command(line) {
    return command(this.port, line);
  }

  /** SIGKILL by pid; waits until the process is gone. */
  async kill() {
    const child = this.child;
    if (!child) return;
    this.child = null;
    if (child.exitCode !== null || child.signalCode !== null) return;
    const exited = new Promise((r) => child.once('exit', r));
    process.kill(child.pid, 'SIGKILL');
    await exited;
  }

  async restart() {
    await this.kill();
    await this.spawn();
  }
}

/** `$POLYLIMIT_VECTORS/<sub>/*.json` (default tests/conformance), sorted, parsed; fails loudly. */
function vectorFiles(sub) {
  const base = process.env.POLYLIMIT_VECTORS || path.resolve(__dirname, '..', '..', 'tests', 'conformance');
  const dir = path.join(base, sub);
  const names = fs
    .readdirSync(dir)
    .filter((n) => n.endsWith('.json'))
    .sort();
  if (names.length === 0) throw new Error(`no vectors in ${dir}`);
  return names.map((name) => [name, JSON.parse(fs.readFileSync(path.join(dir, name), 'utf8'))]);
}

/** Throws if `obj` has a field outside `allowed` or lacks one of `required`. */
function strictFields(obj, allowed, required, where) {
  if (obj === null || typeof obj !== 'object' || Array.isArray(obj)) throw new Error(`${where}: not an object`);
  for (const k of Object.keys(obj)) {
    if (!allowed.includes(k)) throw new Error(`${where}: unknown field ${JSON.stringify(k)}`);
  }
  for (const k of required) {
    if (!(k in obj)) throw new Error(`${where}: missing field ${JSON.stringify(k)}`);
  }
}

/**
 * A real Redis topology from the shared harness (`tests/topology/redis_topology.py`):
 * `await Topology.cluster()` is a 6-node Redis Cluster; `stop()` (or the end of this
 * process, which closes the harness's stdin) stops every server it started.
 */
class Topology {
  static cluster() {
    return Topology.start('cluster');
  }

  static start(kind) {
    const script = path.join(__dirname, '..', '..', 'tests', 'topology', 'redis_topology.py');
    const child = spawn('python3', [script, kind], { stdio: ['pipe', 'pipe', 'inherit'] });
    return new Promise((resolve, reject) => {
      let out = '';
      child.stdout.on('data', (chunk) => {
        out += chunk;
        const end = out.indexOf('\n');
        if (end === -1) return;
        try {
          const described = JSON.parse(out.slice(0, end));
          resolve(Object.assign(new Topology(child), described));
        } catch (e) {
          reject(new Error(`the ${kind} harness failed to start: ${e.message}: ${out}`));
        }
      });
      child.on('exit', (code) => reject(new Error(`the ${kind} harness exited with ${code}`)));
    });
  }

  constructor(child) {
    this.child = child;
  }

  stop() {
    return new Promise((resolve) => {
      this.child.on('exit', resolve);
      this.child.stdin.end();
    });
  }
}

module.exports = { RedisServer, Topology, freePort, vectorFiles, strictFields };
