'use strict';
// The napi addon, through the loader `napi build` generates (binding.js): it
// picks polylimit.<platform>-<arch>[-<abi>].node for this machine.
try {
  module.exports = require('./binding');
} catch (e) {
  e.message = `polylimit: cannot load the native addon (run \`npm run build\`): ${e.message}`;
  throw e;
}
