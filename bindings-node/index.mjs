// ESM entry: the same objects as the CommonJS entry.
import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);
const polylimit = require('./index.js');

export const {
  Limiter,
  Lease,
  CircuitBreaker,
  PolylimitError,
  ConfigError,
  StoreUnavailableError,
  StoreError,
  ClosedError,
  InternalError,
  CircuitOpenError,
  effectiveConfig,
} = polylimit;
export const rateLimit = require('./express.js').rateLimit;
export const polylimitFastify = require('./fastify.js');
export default polylimit;
