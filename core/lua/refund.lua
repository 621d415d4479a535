-- polylimit: refunds, the inverse of an admission of `cost` at `now`.
-- Mirrors core/src/algorithm/refund.rs line for line. Runs as its own
-- script (common.lua then this file), so the decision script is unchanged.
-- ARGV: now_ms, cost, then per policy five values: kind, count, period_ms,
-- burst (or limit), flags (4 = overrides). KEYS: per policy its keys
-- (sliding_window_log takes two), then with flags 4 its override record and
-- the override's state keys: an override in force at now is refunded on its
-- own keys with its own numbers, as the decision charged it. Flags 8: the
-- admission charged an override's state (nothing is given back when no
-- override is in force any more); 16: it charged the policy's own state
-- (given back there even if an override was set since); neither: the state
-- in force at now (a refund in the decision's own pass); 64: a policy-wide
-- limit's state (nothing when that limit's generation is no longer the one
-- in force, or an override is). With flags 4 the policy's five values are
-- followed by a sixth: the limit's record text when flags 32 (a cluster:
-- then no record key), else ''; and the keys by the limit's record key
-- (without flags 32), its generation key and state keys.
-- Returns how many policies' charges were given back. A refund returns the
-- new cells and their time to live, or nil when there is nothing to give
-- back (a window moved on or its state was created after the admission's
-- ms, the log entry is gone, a TAT far ahead, and for
-- the buckets an admission at a later ms since: their cells keep the latest
-- time admitted; a refill, drain or idle TAT capped in between would
-- make giving back admit more than the state without the admission).

-- Cells {tokens * period, last_ms, admitted_ms}: the tokens come back,
-- capped at the capacity; last stays.
local function token_bucket_refund(c, now, cost, count, period, burst)
  if c[3] ~= now then
    return nil
  end
  local cap = burst * period
  local tokens = math.min(c[1] + cost * period, cap)
  return {tokens, c[2], now}, c[2] - now + ceil_div(cap - tokens, count)
end

-- Cells {tokens, last_refill_ms, admitted_ms}: the tokens come back,
-- capped at burst.
local function token_bucket_interval_refund(c, now, cost, count, period, burst)
  if c[3] ~= now then
    return nil
  end
  local tokens = math.min(c[1] + cost, burst)
  local reset = 0
  if tokens < burst then
    reset = c[2] + ceil_div(burst - tokens, count) * period - now
  end
  return {tokens, c[2], now}, reset
end

-- GCRA and the shape queue (cells {tat_ms, tat_rem, admitted_ms}): the
-- TAT goes back by cost * T, never below now's idle point. A TAT far ahead (the clock went back by far) stays.
local function tat_refund(c, now, cost, count, period)
  if c[3] ~= now or far_ahead(c[1], c[2], now, count) then
    return nil
  end
  local wait = math.max(wait_scaled(c[1], c[2], now, count) - cost * period, 0)
  return {now + fdiv(wait, count), wait % count, now}, ceil_div(wait, count)
end

-- Cells {level * period, last_ms, admitted_ms}: the level goes down,
-- not below 0.
local function leaky_bucket_refund(c, now, cost, count, period)
  if c[3] ~= now then
    return nil
  end
  local level = math.max(c[1] - cost * period, 0)
  return {level, c[2], now}, c[2] - now + ceil_div(level, count)
end

-- Cells {window_start_ms, count, created_ms}: the count goes down if the
-- stored window is now's (the one the admission charged) and the state was
-- created no later than the admission (a state created after it, by
-- admissions after a reset, never held its charge).
local function fixed_window_refund(c, now, cost, count, period)
  if c[1] ~= now - now % period or c[3] > now then
    return nil
  end
  local used = math.max(c[2] - cost, 0)
  local reset = 0
  if used > 0 then reset = c[1] + period - now end
  return {c[1], used, c[3]}, reset
end

-- Cells {created_ms, previous, current}: the current count goes down if the
-- state's window is now's and it was created no later than the admission.
local function sliding_window_counter_refund(c, now, cost, count, period)
  local window = c[1] - c[1] % period
  if window ~= now - now % period or c[1] > now then
    return nil
  end
  local current = math.max(c[3] - cost, 0)
  local reset = 0
  if current > 0 then
    reset = window + 2 * period - now
  elseif c[2] > 0 then
    reset = window + period - now
  end
  return {c[1], c[2], current}, reset
end

-- The log loses one entry logged at now for cost (entries alike are
-- interchangeable); cells {sum, seq} lose its cost. The entries the
-- admission trimmed had expired.
local function sliding_window_log_refund(key, log, c, now, cost, period)
  local found = false
  for _, m in ipairs(redis.call('ZRANGEBYSCORE', log, fmt(now), fmt(now))) do
    if tonumber(string.match(m, ':(%d+)$')) == cost then found = m end
  end
  if not found then
    return false
  end
  redis.call('ZREM', log, found)
  local ttl = 0
  local last = redis.call('ZREVRANGE', log, 0, 0, 'WITHSCORES')
  if last[2] and tonumber(last[2]) > now - period then ttl = tonumber(last[2]) + period - now end
  if last[2] then redis.call('PEXPIRE', log, expire_after(ttl)) end
  write_cells(key, c[1] - cost, c[2], 0, ttl)
  return true
end

local CELL_REFUNDS = {
  token_bucket_refund, token_bucket_interval_refund, tat_refund, leaky_bucket_refund,
  tat_refund, fixed_window_refund, false, sliding_window_counter_refund,
}
local TOKEN_BUCKET = 1
local GCRA = 3
local FIXED_WINDOW = 6
local SLIDING_WINDOW_LOG = 7
local KEY_COUNT = {1, 1, 1, 1, 1, 1, 2, 1}

local now = tonumber(ARGV[1])
local cost = tonumber(ARGV[2])
local refunded = 0
local k = 1
local b = 3
while b <= #ARGV do
  local kind = tonumber(ARGV[b])
  local count, period, burst = tonumber(ARGV[b + 1]), tonumber(ARGV[b + 2]), tonumber(ARGV[b + 3])
  local keys_at = k
  local flags = tonumber(ARGV[b + 4])
  local n = KEY_COUNT[kind]
  local gone = false
  local next_k = k + n
  local stride = 5
  if flags % 8 >= 4 then
    stride = 6
    local charged = math.floor(flags / 8) % 8 -- 0 now, 1 an override's, 2 the policy's, 8 (64) a limit's
    local inline = flags % 64 >= 32 and ARGV[b + 5]
    local at = k + n
    local o = nil
    if charged ~= 2 then o = read_override(KEYS[at], kind, now) end
    local l, gen_at = nil, nil
    if not o and (charged == 0 or flags >= 64) then
      l, gen_at = read_limit(KEYS, at + 1 + n, inline, kind, now)
      -- Only the generation whose state is stored (another's is dropped at its next check).
      if l and redis.pcall('GET', KEYS[gen_at]) ~= l[5] then l = nil end
    end
    if o and flags < 64 then
      keys_at = at + 1
      count, period, burst = o[1], o[2], o[3]
    elseif l then
      keys_at = gen_at + 1
      count, period, burst = l[1], l[2], l[3]
    elseif charged == 1 or flags >= 64 then
      gone = true -- charged under an override or a limit that is no longer in force
    end
    next_k = at + 1 + n + (inline and 0 or 1) + 1 + n
  end
  local key = KEYS[keys_at]
  local c = nil
  if not gone and kind == FIXED_WINDOW then
    local w, u, created = fixed_window_cells(key, period)
    if w then c = {w, u, created} end
  elseif not gone then
    c = read_cells(key)
  end
  if c and kind == SLIDING_WINDOW_LOG then
    if sliding_window_log_refund(key, KEYS[keys_at + 1], c, now, cost, period) then refunded = refunded + 1 end
  elseif c then
    local cells, ttl = CELL_REFUNDS[kind](c, now, cost, count, period, burst)
    if cells then
      if kind == TOKEN_BUCKET or kind == GCRA then
        write_bucket(key, cells[1], cells[2], cells[3], now + ttl, now, false)
      else
        local write = kind == FIXED_WINDOW and write_fixed_window or write_cells
        write(key, cells[1], cells[2], cells[3], ttl)
      end
      refunded = refunded + 1
    end
  end
  k = next_k
  b = b + stride
end
return refunded
