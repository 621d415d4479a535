import { polylimitFastify } from './index';
export { FastifyOptions, polylimitFastify } from './index';
export default polylimitFastify;
