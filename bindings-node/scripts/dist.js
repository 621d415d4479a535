#!/usr/bin/env node
'use strict';
// `make node-dist`: the npm packages of a release, in napi-rs's layout. The
// main package `polylimit` (the JS, the generated loader, the types) declares
// one optional dependency per platform of `napi.targets`, all at the release
// version; each platform package `polylimit-<platform>` holds only its
// stripped `.node`. Both are `npm pack`ed into $DIST, then their file lists
// are checked (no network, no registry: the platform package.json files come
// from `napi create-npm-dirs`, which only reads package.json).
//
//   node scripts/dist.js --version 0.1.0 --dist ../dist --stage ../target/node-dist/stage \
//     --addon x86_64-unknown-linux-gnu=../target/node-dist/x86_64-unknown-linux-gnu/polylimit.linux-x64-gnu.node
const { execFileSync } = require('node:child_process');
const fs = require('node:fs');
const path = require('node:path');

const HERE = path.resolve(__dirname, '..');

/** napi-rs's platform name of a Rust target triple (the suffix of the package name). */
function platformOf(triple) {
  const t = triple.replace(/\.\d+(\.\d+)*$/, ''); // x86_64-unknown-linux-gnu.2.17
  const arch = { x86_64: 'x64', aarch64: 'arm64', i686: 'ia32', armv7: 'arm' }[t.split('-')[0]];
  if (!arch) throw new Error(`unsupported target triple ${triple}`);
  if (t.includes('-apple-darwin')) return `darwin-${arch}`;
  if (t.endsWith('-pc-windows-msvc')) return `win32-${arch}-msvc`;
  const linux = /-unknown-linux-(gnu|musl)$/.exec(t);
  if (linux) return `linux-${arch}-${linux[1]}`;
  throw new Error(`unsupported target triple ${triple}`);
}

/** The workspace version (Cargo.toml), the one place it is set. */
function workspaceVersion(cargoToml = path.join(HERE, '..', 'Cargo.toml')) {
  const m = /^version = "([^"]+)"/m.exec(fs.readFileSync(cargoToml, 'utf8'));
  if (!m) throw new Error(`no version = "..." in ${cargoToml}`);
  return m[1];
}

/** Fails unless the repository's package.json carries the release version. */
function checkVersion(pkg, version) {
  if (pkg.version !== version) {
    throw new Error(
      `bindings-node/package.json has version ${pkg.version} but the workspace Cargo.toml says ${version}: ` +
        `set "version": "${version}" in bindings-node/package.json`,
    );
  }
}

/** The published package.json of the main package: no dev fields, the optional platform packages. */
function mainPackageJson(pkg, version) {
  const out = { ...pkg, version };
  delete out.devDependencies;
  delete out.scripts;
  out.optionalDependencies = {};
  for (const triple of pkg.napi.targets) out.optionalDependencies[`${pkg.name}-${platformOf(triple)}`] = version;
  return out;
}

function platformReadme(name, platform, triple, main, glibc) {
  return `# ${name}

The **${triple}** native addon of [\`${main}\`](https://www.npmjs.com/package/${main}).
Do not install it by itself: \`npm install ${main}\` installs the package for
your platform as an optional dependency${glibc ? `.

Needs glibc ${glibc} or newer.` : '.'}
`;
}

/** `tar tzf` of a tarball, without the `package/` prefix npm puts before every path. */
function tarList(tgz) {
  return execFileSync('tar', ['tzf', tgz], { encoding: 'utf8' })
    .split('\n')
    .filter((l) => l && !l.endsWith('/'))
    .map((l) => l.replace(/^package\//, ''))
    .sort();
}

/** Fails when a tarball holds a file not in `expected` or lacks one of them. */
function checkTarball(tgz, expected) {
  const got = tarList(tgz);
  const want = [...expected].sort();
  const extra = got.filter((f) => !want.includes(f));
  const missing = want.filter((f) => !got.includes(f));
  if (extra.length || missing.length) {
    throw new Error(
      `${path.basename(tgz)}: ` +
        (extra.length ? `unexpected files: ${extra.join(', ')}` : '') +
        (extra.length && missing.length ? '; ' : '') +
        (missing.length ? `missing files: ${missing.join(', ')}` : ''),
    );
  }
  return got;
}

function npmPack(dir, dest) {
  const out = execFileSync('npm', ['pack', '--json', '--pack-destination', dest, '--loglevel=error'], {
    cwd: dir,
    encoding: 'utf8',
    env: { ...process.env, npm_config_ignore_scripts: 'true' },
  });
  return path.join(dest, JSON.parse(out)[0].filename);
}

/** The highest GLIBC_x.y symbol version an ELF file names (its .dynstr; any architecture). */
function glibcNeeded(file) {
  const vs = [...new Set(fs.readFileSync(file).toString('latin1').match(/GLIBC_[0-9]+(\.[0-9]+)+/g) || [])];
  const key = (v) => v.slice(6).split('.').map(Number);
  vs.sort((a, b) => {
    const [x, y] = [key(a), key(b)];
    for (let i = 0; i < Math.max(x.length, y.length); i++) if ((x[i] || 0) !== (y[i] || 0)) return (x[i] || 0) - (y[i] || 0);
    return 0;
  });
  return vs.length ? vs[vs.length - 1].slice(6) : null;
}

function parseArgs(argv) {
  const args = { addons: [] };
  for (let i = 0; i < argv.length; i += 2) {
    const [k, v] = [argv[i], argv[i + 1]];
    if (v === undefined) throw new Error(`${k} needs a value`);
    if (k === '--version') args.version = v;
    else if (k === '--dist') args.dist = path.resolve(v);
    else if (k === '--stage') args.stage = path.resolve(v);
    else if (k === '--addon') {
      const eq = v.indexOf('=');
      if (eq < 1) throw new Error(`--addon wants <triple>=<file.node>, got ${v}`);
      args.addons.push({ triple: v.slice(0, eq), file: path.resolve(v.slice(eq + 1)) });
    } else throw new Error(`unknown option ${k}`);
  }
  for (const k of ['version', 'dist', 'stage']) if (!args[k]) throw new Error(`--${k} is required`);
  return args;
}

function main() {
  const args = parseArgs(process.argv.slice(2));
  const pkg = JSON.parse(fs.readFileSync(path.join(HERE, 'package.json'), 'utf8'));
  checkVersion(pkg, args.version);
  const license = path.join(HERE, '..', 'LICENSE');
  const binding = fs.readFileSync(path.join(HERE, 'binding.js'), 'utf8');
  if (!binding.includes(`expected ${args.version} but got`)) {
    throw new Error(`binding.js does not check for version ${args.version}: rebuild it (npm run build)`);
  }

  fs.rmSync(args.stage, { recursive: true, force: true });
  const mainDir = path.join(args.stage, pkg.name);
  fs.mkdirSync(mainDir, { recursive: true });
  for (const f of pkg.files) {
    if (f.includes('*')) throw new Error(`package.json files: no globs please (${f})`);
    fs.copyFileSync(path.join(HERE, f), path.join(mainDir, f));
  }
  fs.copyFileSync(path.join(HERE, 'README.md'), path.join(mainDir, 'README.md'));
  fs.copyFileSync(license, path.join(mainDir, 'LICENSE'));
  fs.writeFileSync(path.join(mainDir, 'package.json'), JSON.stringify(mainPackageJson(pkg, args.version), null, 2) + '\n');

  // One directory per declared platform, as napi-rs lays them out (napi wants
  // it inside the package; `files` keeps it out of the main tarball).
  const npmDir = path.join(mainDir, 'npm');
  execFileSync(path.join(HERE, 'node_modules', '.bin', 'napi'), ['create-npm-dirs', '--cwd', mainDir, '--npm-dir', npmDir], {
    stdio: ['ignore', 'ignore', 'inherit'],
  });

  fs.mkdirSync(args.dist, { recursive: true });
  const built = [];
  for (const { triple, file } of args.addons) {
    const platform = platformOf(triple);
    const name = `${pkg.name}-${platform}`;
    if (!mainPackageJson(pkg, args.version).optionalDependencies[name]) {
      throw new Error(`${triple} (${platform}) is not in package.json napi.targets`);
    }
    const dir = path.join(npmDir, platform);
    const node = `${pkg.napi.binaryName}.${platform}.node`;
    const meta = JSON.parse(fs.readFileSync(path.join(dir, 'package.json'), 'utf8'));
    if (meta.name !== name || meta.main !== node || meta.version !== args.version) {
      throw new Error(`napi create-npm-dirs wrote ${meta.name}@${meta.version} (${meta.main}), expected ${name}@${args.version} (${node})`);
    }
    fs.copyFileSync(file, path.join(dir, node));
    const glibc = platform.endsWith('-gnu') ? glibcNeeded(file) : null;
    fs.writeFileSync(path.join(dir, 'README.md'), platformReadme(name, platform, triple.replace(/\.\d+(\.\d+)*$/, ''), pkg.name, glibc));
    fs.copyFileSync(license, path.join(dir, 'LICENSE'));
    const tgz = npmPack(dir, args.dist);
    checkTarball(tgz, ['package.json', 'README.md', 'LICENSE', node]);
    built.push({ tgz, glibc });
  }

  const tgz = npmPack(mainDir, args.dist);
  checkTarball(tgz, ['package.json', 'README.md', 'LICENSE', ...pkg.files]);
  for (const { tgz: t, glibc } of [{ tgz }, ...built]) {
    const mb = (fs.statSync(t).size / 1e6).toFixed(2);
    console.log(`  ${path.relative(process.cwd(), t)}  ${mb} MB${glibc ? `  (needs glibc >= ${glibc})` : ''}`);
  }
}

module.exports = { glibcNeeded, platformOf, workspaceVersion, checkVersion, mainPackageJson, checkTarball, tarList };

if (require.main === module) {
  try {
    main();
  } catch (e) {
    console.error(`node-dist: ${e.message}`);
    process.exit(1);
  }
}
