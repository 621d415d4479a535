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
-- A negative cost is a forced debit of -cost at now (a completion whose
-- actual cost exceeded the reservation): charged whatever the state holds.
-- Returns how many policies' charges were given back (or debited). A refund returns the
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
  local found, larger = false, false
  for _, m in ipairs(redis.call('ZRANGEBYSCORE', log, fmt(now), fmt(now))) do
    local logged = tonumber(string.match(m, ':(%d+)$'))
    if logged == cost then found = m end
    if logged > cost then larger = m end
  end
  if not found and not larger then
    return false
  end
  if found then
    redis.call('ZREM', log, found)
  else
    -- Part of an admission: that entry is lowered by cost (decisions read
    -- only the cost logged at each time).
    redis.call('ZREM', log, larger)
    local seq, logged = string.match(larger, '^(.*):(%d+)$')
    redis.call('ZADD', log, fmt(now), seq .. ':' .. fmt(tonumber(logged) - cost))
  end
  local ttl = 0
  local last = redis.call('ZREVRANGE', log, 0, 0, 'WITHSCORES')
  if last[2] and tonumber(last[2]) > now - period then ttl = tonumber(last[2]) + period - now end
  if last[2] then redis.call('PEXPIRE', log, expire_after(ttl)) end
  write_cells(key, c[1] - cost, c[2], 0, ttl)
  return true
end


-- Forced debits (refund.rs `debit`): a negative cost charges -cost at now
-- whatever the state holds, after moving it to now as a decision would; a
-- missing state starts as a new key's. Each returns the new cells and
-- their time to live, or nil (a TAT far ahead).
local function token_bucket_debit(c, now, cost, count, period, burst)
  local cap = burst * period
  local tokens, last, admitted = cap, now, now
  if c then tokens, last, admitted = c[1], c[2], math.max(c[3], now) end
  if now > last then
    if now - last >= ceil_div(cap - tokens, count) then
      tokens = cap
    else
      tokens = tokens + (now - last) * count
    end
    last = now
  end
  tokens = tokens - cost * period
  return {tokens, last, admitted}, last - now + ceil_div(cap - tokens, count)
end

local function token_bucket_interval_debit(c, now, cost, count, period, burst)
  local tokens, last, admitted = burst, now, now
  if c then tokens, last, admitted = c[1], c[2], math.max(c[3], now) end
  if now > last then
    local periods = fdiv(now - last, period)
    if periods >= ceil_div(burst - tokens, count) then
      tokens = burst
      last = now
    else
      tokens = tokens + periods * count
      last = last + periods * period
    end
  end
  tokens = tokens - cost
  return {tokens, last, admitted}, last + ceil_div(burst - tokens, count) * period - now
end

local function tat_debit(c, now, cost, count, period)
  local tat, rem, admitted = nil, nil, now
  if c then tat, rem, admitted = c[1], c[2], math.max(c[3], now) end
  if far_ahead(tat, rem, now, count) then
    return nil
  end
  local wait = math.min(wait_scaled(tat, rem, now, count) + cost * period, MAX_WAIT_SCALED)
  return {now + fdiv(wait, count), wait % count, admitted}, ceil_div(wait, count)
end

local function leaky_bucket_debit(c, now, cost, count, period)
  local level, last, admitted = 0, now, now
  if c then level, last, admitted = c[1], c[2], math.max(c[3], now) end
  if now > last then
    if now - last >= ceil_div(level, count) then
      level = 0
    else
      level = level - (now - last) * count
    end
    last = now
  end
  level = level + cost * period
  return {level, last, admitted}, last - now + ceil_div(level, count)
end

local function fixed_window_debit(c, now, cost, count, period)
  local start = now - now % period
  local w, u, created = start, 0, now
  if c and c[1] >= start then w, u, created = c[1], c[2], c[3] end
  return {w, u + cost, created}, w + period - now
end

local function sliding_window_counter_debit(c, now, cost, count, period)
  local start = now - now % period
  local cells = {now, 0, 0}
  if c then
    local window = c[1] - c[1] % period
    if window >= start then
      cells = {c[1], c[2], c[3]}
    elseif window + period == start then
      cells = {start, c[3], 0}
    end
  end
  local window = cells[1] - cells[1] % period
  return {cells[1], cells[2], cells[3] + cost}, window + 2 * period - now
end

-- The log gains an entry of cost at now; the expired ones go.
local function sliding_window_log_debit(key, log, c, now, cost, period)
  local sum, seq = 0, 0
  if c then
    sum, seq = c[1], c[2]
    for _, m in ipairs(redis.call('ZRANGEBYSCORE', log, '-inf', fmt(now - period))) do
      sum = sum - tonumber(string.match(m, ':(%d+)$'))
    end
    redis.call('ZREMRANGEBYSCORE', log, '-inf', fmt(now - period))
  else
    redis.call('DEL', log)
  end
  redis.call('ZADD', log, fmt(now), fmt(seq + 1) .. ':' .. fmt(cost))
  local last = redis.call('ZREVRANGE', log, 0, 0, 'WITHSCORES')
  local ttl = tonumber(last[2]) + period - now
  redis.call('PEXPIRE', log, expire_after(ttl))
  write_cells(key, sum + cost, seq + 1, 0, ttl)
  return true
end

local CELL_DEBITS = {
  token_bucket_debit, token_bucket_interval_debit, tat_debit, leaky_bucket_debit,
  tat_debit, fixed_window_debit, false, sliding_window_counter_debit,
}

local CELL_REFUNDS = {
  token_bucket_refund, token_bucket_interval_refund, tat_refund, leaky_bucket_refund,
  tat_refund, fixed_window_refund, false, sliding_window_counter_refund,
}
local TOKEN_BUCKET = 1
local GCRA = 3
local FIXED_WINDOW = 6
local SLIDING_WINDOW_LOG = 7
local SLIDING_WINDOW_COUNTER = 8
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
  if gone or kind > SLIDING_WINDOW_COUNTER then
    -- Nothing to give back or charge (a concurrency key is released, never refunded).
  elseif cost < 0 and kind == SLIDING_WINDOW_LOG then
    if sliding_window_log_debit(key, KEYS[keys_at + 1], c, now, -cost, period) then refunded = refunded + 1 end
  elseif c and kind == SLIDING_WINDOW_LOG then
    if sliding_window_log_refund(key, KEYS[keys_at + 1], c, now, cost, period) then refunded = refunded + 1 end
  elseif c or cost < 0 then
    local cells, ttl
    if cost < 0 then
      cells, ttl = CELL_DEBITS[kind](c, now, -cost, count, period, burst)
    else
      cells, ttl = CELL_REFUNDS[kind](c, now, cost, count, period, burst)
    end
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
