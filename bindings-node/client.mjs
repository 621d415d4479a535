// ESM entry of polylimit/client: the same objects as the CommonJS entry.
import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);
const client = require('./client.js');

export const { retryFetch, retryWait, parseRetryAfter, DEFAULTS } = client;
export default retryFetch;
