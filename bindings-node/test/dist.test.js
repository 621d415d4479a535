'use strict';
// The published layout (make node-dist): the main package finds its platform
// package, and says which one is missing, or that the platform has none, when
// it cannot. Each case copies the package's JS into a temp dir with the
// package.json node-dist publishes and no local .node, then loads it in a
// child process.
const assert = require('node:assert');
const { execFileSync, spawnSync } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const test = require('node:test');

const dist = require('../scripts/dist.js');

const HERE = path.resolve(__dirname, '..');
const pkg = require('../package.json');
const version = dist.workspaceVersion();

/** This machine's napi platform name, as the loader computes it. */
function hostPlatform() {
  const { platform, arch } = process;
  if (platform === 'linux') {
    const musl = fs.existsSync('/usr/bin/ldd') && fs.readFileSync('/usr/bin/ldd', 'utf8').includes('musl');
    return `linux-${arch}-${musl ? 'musl' : 'gnu'}`;
  }
  return platform === 'win32' ? `win32-${arch}-msvc` : `${platform}-${arch}`;
}

const platform = hostPlatform();
const addon = path.join(HERE, `${pkg.napi.binaryName}.${platform}.node`);

/** A temp node_modules/polylimit as npm would install the main tarball (no .node). */
function install(publishedPkg, platformPackage) {
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'polylimit-dist-'));
  const dir = path.join(root, 'node_modules', pkg.name);
  fs.mkdirSync(dir, { recursive: true });
  for (const f of pkg.files) fs.copyFileSync(path.join(HERE, f), path.join(dir, f));
  fs.writeFileSync(path.join(dir, 'package.json'), JSON.stringify(publishedPkg));
  if (platformPackage) {
    const p = path.join(root, 'node_modules', platformPackage.name);
    fs.mkdirSync(p);
    fs.writeFileSync(path.join(p, 'package.json'), JSON.stringify(platformPackage));
    fs.symlinkSync(addon, path.join(p, platformPackage.main));
  }
  return root;
}

/** Loads `polylimit` from `root` in a child; its stdout, stderr and status. */
function load(root, code = "console.log(JSON.stringify(require('polylimit').effectiveConfig({ policy: { rate: '5/s' } })))") {
  const env = { ...process.env };
  delete env.NAPI_RS_NATIVE_LIBRARY_PATH;
  delete env.NODE_PATH;
  const r = spawnSync(process.execPath, ['-e', code], { cwd: root, env, encoding: 'utf8' });
  return { out: r.stdout.trim(), err: r.stderr, status: r.status };
}

test('the repository package.json carries the workspace version (Cargo.toml)', () => {
  assert.strictEqual(pkg.version, version);
  assert.doesNotThrow(() => dist.checkVersion(pkg, version));
  assert.throws(() => dist.checkVersion({ ...pkg, version: '0.0.0-stale' }, version), /bindings-node\/package.json has version 0\.0\.0-stale but the workspace Cargo\.toml says/);
});

test('the published package.json depends on every napi target at the release version', () => {
  const published = dist.mainPackageJson(pkg, version);
  assert.deepStrictEqual(published.optionalDependencies, {
    'polylimit-linux-x64-gnu': version,
    'polylimit-linux-arm64-gnu': version,
    'polylimit-linux-x64-musl': version,
    'polylimit-darwin-x64': version,
    'polylimit-darwin-arm64': version,
    'polylimit-win32-x64-msvc': version,
  });
  assert.strictEqual(published.devDependencies, undefined);
  assert.strictEqual(published.scripts, undefined);
  assert.ok(!published.files.some((f) => f.endsWith('.node')), 'the main package carries no addon');
  for (const t of ['index.d.ts', 'express.d.ts', 'fastify.d.ts', 'binding.d.ts']) assert.ok(published.files.includes(t), t);
});

test('the main package loads the addon from its platform package', () => {
  const published = dist.mainPackageJson(pkg, version);
  const root = install(published, { name: `polylimit-${platform}`, version, main: path.basename(addon) });
  const r = load(root);
  assert.strictEqual(r.status, 0, r.err);
  assert.match(r.out, /"rate":"5\/1000ms"/);
  assert.strictEqual(load(root, "console.log(require('polylimit/package.json').version)").out, version);
});

test('a missing platform package is named, with its version and how to install it', () => {
  const root = install(dist.mainPackageJson(pkg, version));
  const r = load(root);
  assert.notStrictEqual(r.status, 0);
  assert.match(
    r.err,
    new RegExp(
      `polylimit: no native addon for ${platform}: the optional package polylimit-${platform}@${version.replace(/\./g, '\\.')} is not installed \\(npm install --include=optional polylimit-${platform}@`,
    ),
  );
  assert.match(r.err, /code: 'POLYLIMIT_NO_ADDON'/);
});

test('a platform package at another version is named, not loaded', () => {
  const root = install(dist.mainPackageJson(pkg, version), { name: `polylimit-${platform}`, version: '0.0.1', main: path.basename(addon) });
  const r = load(root);
  assert.notStrictEqual(r.status, 0);
  assert.match(r.err, new RegExp(`polylimit@${version.replace(/\./g, '\\.')} needs polylimit-${platform}@.* but polylimit-${platform}@0\\.0\\.1 is installed`));
});

test('a platform without a published addon says so and how to build from source', () => {
  const other = { ...pkg, napi: { ...pkg.napi, targets: pkg.napi.targets.filter((t) => dist.platformOf(t) !== platform) } };
  const root = install(dist.mainPackageJson(other, version));
  const r = load(root);
  assert.notStrictEqual(r.status, 0);
  assert.match(r.err, new RegExp(`polylimit: no prebuilt native addon for ${platform} \\(polylimit@.* ships `));
  assert.match(r.err, /Build it from source \(needs Rust >= [0-9.]+ from rustup, a C linker and Node >= 18\)/);
  assert.match(r.err, /make node-build/);
});

test('platformOf maps Rust triples to napi platform names', () => {
  assert.strictEqual(dist.platformOf('x86_64-unknown-linux-gnu'), 'linux-x64-gnu');
  assert.strictEqual(dist.platformOf('x86_64-unknown-linux-gnu.2.17'), 'linux-x64-gnu');
  assert.strictEqual(dist.platformOf('aarch64-unknown-linux-gnu'), 'linux-arm64-gnu');
  assert.strictEqual(dist.platformOf('x86_64-unknown-linux-musl'), 'linux-x64-musl');
  assert.strictEqual(dist.platformOf('aarch64-apple-darwin'), 'darwin-arm64');
  assert.strictEqual(dist.platformOf('x86_64-pc-windows-msvc'), 'win32-x64-msvc');
  assert.throws(() => dist.platformOf('riscv64gc-unknown-linux-gnu'), /unsupported target triple/);
});

test('the tarball check fails on an unexpected or a missing file', () => {
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'polylimit-tgz-'));
  fs.mkdirSync(path.join(root, 'package'));
  for (const f of ['package.json', 'index.js', 'polylimit.linux-x64-gnu.node']) fs.writeFileSync(path.join(root, 'package', f), '{}');
  const tgz = path.join(root, 'p.tgz');
  execFileSync('tar', ['czf', tgz, '-C', root, 'package']);
  assert.deepStrictEqual(dist.checkTarball(tgz, ['package.json', 'index.js', 'polylimit.linux-x64-gnu.node']).length, 3);
  assert.throws(() => dist.checkTarball(tgz, ['package.json', 'index.js']), /unexpected files: polylimit\.linux-x64-gnu\.node/);
  assert.throws(() => dist.checkTarball(tgz, ['package.json', 'index.js', 'polylimit.linux-x64-gnu.node', 'LICENSE']), /missing files: LICENSE/);
});
