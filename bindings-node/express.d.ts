export { rateLimit, ExpressOptions, RateLimitMiddleware } from './index';
export { rateLimit as default } from './index';
