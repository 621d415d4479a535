-- ARGV: now_ms ('' = use the server's TIME), cost, then per policy five
-- values: kind, count, period_ms, burst (or limit), max_delay (scaled).
-- KEYS: the policies' keys in order (sliding_window_log takes two).
-- Returns {all_allowed, now, then per policy: allowed, remaining,
-- reset_after_ms, retry_after_ms (-1 = none), delay_ms}. Nothing is written
-- unless every policy allows.
local KINDS = {
  token_bucket, token_bucket_interval, gcra, leaky_bucket,
  leaky_bucket_shape, fixed_window, sliding_window_log, sliding_window_counter,
}
local KEY_COUNT = {1, 1, 1, 1, 1, 1, 2, 1}

local now
if ARGV[1] == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
else
  now = tonumber(ARGV[1])
end
local cost = tonumber(ARGV[2])

local out = {1, now}
local commits = {}
local k = 1
for b = 3, #ARGV, 5 do
  local kind = tonumber(ARGV[b])
  local allowed, remaining, reset, retry, delay, commit = KINDS[kind](KEYS, k, now, cost,
    tonumber(ARGV[b + 1]), tonumber(ARGV[b + 2]), tonumber(ARGV[b + 3]), tonumber(ARGV[b + 4]))
  k = k + KEY_COUNT[kind]
  if allowed then
    commits[#commits + 1] = commit
    out[#out + 1] = 1
  else
    out[1] = 0
    out[#out + 1] = 0
  end
  if remaining < 0 then remaining = 0 end
  if reset < 0 then reset = 0 end
  if retry then
    if retry < 0 then retry = 0 end
  else
    retry = -1
  end
  out[#out + 1] = remaining
  out[#out + 1] = reset
  out[#out + 1] = retry
  out[#out + 1] = delay
end
if out[1] == 1 then
  for i = 1, #commits do commits[i]() end
end
return out
