#!/usr/bin/env node
// Builds the addon with cargo (offline-safe: nothing is downloaded) and copies
// it to polylimit.<platform>-<arch>.node, where native.js loads it.
'use strict';
const { execFileSync } = require('node:child_process');
const fs = require('node:fs');
const path = require('node:path');

const root = path.resolve(__dirname, '..');
const profile = process.env.POLYLIMIT_PROFILE || 'release';
const cargo = process.env.CARGO || 'cargo';
const target = process.env.CARGO_TARGET_DIR || path.resolve(root, '..', 'target');
const args = ['build', '-p', 'polylimit-node', '--quiet'];
if (profile === 'release') args.push('--release');
execFileSync(cargo, args, { cwd: root, stdio: 'inherit', env: { ...process.env, CARGO_TARGET_DIR: target } });

const lib = { linux: 'libpolylimit_node.so', darwin: 'libpolylimit_node.dylib', win32: 'polylimit_node.dll' }[process.platform];
const from = path.join(target, profile === 'release' ? 'release' : 'debug', lib);
const to = path.join(root, `polylimit.${process.platform}-${process.arch}.node`);
// Copy to a temp name and rename, so a running process never sees half a file.
fs.copyFileSync(from, `${to}.tmp`);
fs.renameSync(`${to}.tmp`, to);
console.log(`built ${path.basename(to)}`);
