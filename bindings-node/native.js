'use strict';
// Loads the napi addon built by `npm run build` for this platform.
const path = require('node:path');

const file = path.join(__dirname, `polylimit.${process.platform}-${process.arch}.node`);
try {
  module.exports = require(file);
} catch (e) {
  e.message = `polylimit: cannot load the native addon ${file} (run \`npm run build\`): ${e.message}`;
  throw e;
}
