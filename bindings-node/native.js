'use strict';
// The napi addon, through the loader `napi build` generates (binding.js): it
// loads polylimit.<platform>.node from this directory (the in-repo build,
// `make node-build`) or else from the optional package polylimit-<platform>
// that `npm install polylimit` adds for this machine. When neither loads, the
// error says which package this platform needs, or that none is published for
// it and how to build one.
const fs = require('node:fs');
const path = require('node:path');

/** As binding.js tells: ldd's text first (cheap), then the process report. */
function isMusl() {
  try {
    return fs.readFileSync('/usr/bin/ldd', 'utf8').includes('musl');
  } catch {
    // no ldd: ask the process report below
  }
  try {
    return !process.report.getReport().header.glibcVersionRuntime;
  } catch {
    return false;
  }
}

/** napi-rs's name of this platform: linux-x64-gnu, darwin-arm64, win32-x64-msvc, ... */
function platformName() {
  const { platform, arch } = process;
  if (platform === 'linux') return `linux-${arch}-${isMusl() ? 'musl' : 'gnu'}`;
  if (platform === 'win32') return `win32-${arch}-msvc`;
  return `${platform}-${arch}`;
}

function installedVersion(name) {
  try {
    return require(`${name}/package.json`).version;
  } catch {
    return null;
  }
}

/** The error to throw when binding.js found no addon (`cause` is its error). */
function explain(cause) {
  const pkg = require('./package.json');
  const platform = platformName();
  const wanted = `${pkg.name}-${platform}`;
  const shipped = Object.keys(pkg.optionalDependencies || {});
  let message;
  if (shipped.length === 0) {
    // The repository's own package.json: the in-repo build.
    message =
      `${pkg.name}: cannot load the native addon ${pkg.napi.binaryName}.${platform}.node ` +
      `(build it: \`make node-build\` at the repository root, or \`npm run build\` in bindings-node): ${cause.message}`;
  } else if (!shipped.includes(wanted)) {
    const list = shipped.map((n) => n.slice(pkg.name.length + 1)).join(', ');
    message =
      `${pkg.name}: no prebuilt native addon for ${platform} (${pkg.name}@${pkg.version} ships ${list}). ` +
      `Build it from source (needs Rust >= 1.88 from rustup, a C linker and Node >= 18): clone the polylimit repository ` +
      `at v${pkg.version}, run \`make node-build\`, then \`npm install <checkout>/bindings-node\`.`;
  } else {
    const have = installedVersion(wanted);
    if (have === null) {
      message =
        `${pkg.name}: no native addon for ${platform}: the optional package ${wanted}@${pkg.version} is not installed ` +
        `(npm install --include=optional ${wanted}@${pkg.version}, or reinstall ${pkg.name} without --omit=optional / --no-optional)`;
    } else if (have !== pkg.version) {
      message =
        `${pkg.name}: ${pkg.name}@${pkg.version} needs ${wanted}@${pkg.version} but ${wanted}@${have} is installed ` +
        `(npm install ${wanted}@${pkg.version})`;
    } else {
      message = `${pkg.name}: the native addon ${wanted}@${have} is installed but does not load: ${innermost(cause)}`;
    }
  }
  const error = new Error(message);
  error.code = 'POLYLIMIT_NO_ADDON';
  error.cause = cause;
  return error;
}

/** The load errors binding.js chains through `cause`, the platform package's last. */
function innermost(e) {
  const messages = [];
  for (let c = e; c && messages.length < 8; c = c.cause) messages.push(c.message);
  const found = messages.filter((m) => !/Cannot find module/.test(m) && !/Cannot find native binding/.test(m));
  return found.length ? found.join('; ') : messages.join('; ');
}

/** The platform package's version when it is installed at another version than this package. */
function mismatch() {
  const pkg = require('./package.json');
  if (!pkg.optionalDependencies) return null;
  const wanted = `${pkg.name}-${platformName()}`;
  if (!(wanted in pkg.optionalDependencies)) return null;
  if (fs.existsSync(path.join(__dirname, `${pkg.napi.binaryName}.${platformName()}.node`))) return null; // a local build wins
  const have = installedVersion(wanted);
  return have !== null && have !== pkg.version ? explain(new Error(`${wanted}@${have}`)) : null;
}

const stale = mismatch();
if (stale) throw stale;
try {
  module.exports = require('./binding');
} catch (e) {
  throw explain(e);
}
