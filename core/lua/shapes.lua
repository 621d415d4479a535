-- The common shapes, one function each (registered beside the general
-- check): one policy on one key, no penalty, adaptive spec, override,
-- shadow, lease or peek. ARGV: now_ms ('' = the server's TIME), cost, count,
-- period_ms, burst (or limit). The same algorithm functions as the general
-- path, without its argument walk, dispatch tables and override read.
-- Returns {allowed, now, remaining, reset_after_ms, retry_after_ms (-1 = none)}.
local function decide_shape(algorithm, keys, argv)
  local now = argv[1]
  if now == '' then
    local t = redis.call('TIME')
    now = t[1] * 1000 + math.floor(t[2] / 1000)
  else
    now = now + 0
  end
  local allowed, remaining, reset, retry, _, a, b, c, ttl =
    algorithm(keys, 1, now, argv[2] + 0, argv[3] + 0, argv[4] + 0, argv[5] + 0, 0)
  if allowed then write_cells(keys[1], a, b, c, ttl) end
  remaining, reset, retry = reply_values(remaining, reset, retry)
  return {allowed and 1 or 0, now, remaining, reset, retry}
end

local function check_fixed_window(keys, argv) return decide_shape(fixed_window, keys, argv) end
local function check_token_bucket(keys, argv) return decide_shape(token_bucket, keys, argv) end
local function check_gcra(keys, argv) return decide_shape(gcra, keys, argv) end
