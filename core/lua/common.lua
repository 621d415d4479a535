-- polylimit: one atomic decision for one or more policies.
-- Mirrors core/src/algorithm/*.rs line for line. All numbers are integers
-- below 2^52 (policy validation guarantees it), so Lua doubles are exact.
-- State of a key is three integers (one GET, one SET PX), packed as a marker
-- byte and three little-endian 64-bit integers: struct.unpack is a third
-- cheaper than matching and formatting text. The text form "a b c" that
-- earlier versions wrote is still read, so a rolling upgrade keeps counts.

local function ceil_div(a, b)
  if a <= 0 then return 0 end
  return math.floor((a + b - 1) / b)
end

local function fdiv(a, b)
  return math.floor(a / b)
end

-- ceil(a / b) for any a, b > 0.
local function ceil_frac(a, b)
  return -math.floor(-a / b)
end

local function fmt(n)
  return string.format('%d', n)
end

local CELLS = '<Blll'
local CELLS_MARK = 1
local CELLS_SIZE = 25

-- A token bucket's (continuous refill) and GCRA's state also holds its
-- key's expiry, expires_ms on the decisions' clock: the cells and that,
-- packed after marker 2 (write_bucket).
local BUCKET = '<Bllll'
local BUCKET_MARK = 2
local BUCKET_SIZE = 33
local BUCKET_CELLS = '<lll' -- the cells alone, at offset 1

-- The three cells in `raw` (a key's value) as three values (a token
-- bucket's: four, its expires_ms fourth; nil in the older form).
local function cells_in(key, raw)
  local size = #raw
  if size == BUCKET_SIZE and string.byte(raw, 1) == BUCKET_MARK then
    local _, a, b, c, e = struct.unpack(BUCKET, raw)
    return a, b, c, e
  end
  if size == CELLS_SIZE and string.byte(raw, 1) == CELLS_MARK then
    local _, a, b, c = struct.unpack(CELLS, raw)
    return a, b, c
  end
  local a, b, c = string.match(raw, '^(%-?%d+) (%-?%d+) (%-?%d+)$')
  if not a then
    error({err = 'POLYLIMIT_STATE key ' .. key .. ' does not hold polylimit state'})
  end
  return tonumber(a), tonumber(b), tonumber(c)
end

-- The three cells of a key as three values (no table), or nil.
local function cells_of(key)
  local raw = redis.call('GET', key)
  if not raw then return nil end
  return cells_in(key, raw)
end

-- The cells as a table {a, b, c}, or nil (refunds).
local function read_cells(key)
  local a, b, c = cells_of(key)
  if a then return {a, b, c} end
  return nil
end

-- A key lives until it is back to idle, plus a margin: an expired key and an
-- idle one decide alike, and the margin keeps a key alive between the steps
-- of a simulation that passes explicit now_ms while real time moves on.
local TTL_MARGIN_MS = 1000

-- PX goes as text: a number is no cheaper (Redis 7.0 prints it with
-- %.17g: 850 ns per SET against 800 with string.format), and Redis
-- 7.2.0-7.2.4 print 1e8 and up as "1e+08", which PX refuses.
local function expire_after(ttl)
  if ttl < 0 then ttl = 0 end
  return fmt(ttl + TTL_MARGIN_MS)
end

local function write_cells(key, a, b, c, ttl)
  redis.call('SET', key, struct.pack(CELLS, CELLS_MARK, a, b, c), 'PX', expire_after(ttl))
end

-- A token bucket's key lives until the bucket is full again (full_ms; for
-- GCRA, the TAT) plus the margin. Its state holds the expiry it was given, so the shape
-- function (shapes.lua) can overwrite the cells in place and keep the
-- expiry while that still covers full_ms and is at most TTL_SLACK_MS later:
-- a SET with PX costs a sixth of the decision. This writes the state and its
-- expiry: with `slack` (a key written before, the clock not gone back)
-- TTL_SLACK_MS later, so the admissions of the next second keep it;
-- without (a new key, the general check, a refund), exactly full_ms plus
-- the margin.
local TTL_SLACK_MS = 1000

local function write_bucket(key, tokens, last, admitted, full, now, slack)
  local expires = full + TTL_MARGIN_MS
  if slack then expires = expires + TTL_SLACK_MS end
  redis.call('SET', key, struct.pack(BUCKET, BUCKET_MARK, tokens, last, admitted, expires), 'PX', fmt(expires - now))
end

-- A fixed window's state, when it fits, is one integer, created_ms * 10^6
-- + count (decimal, so it stays exact past 2^53), that INCRBY bumps in place
-- and keeps the key's expiry: the shape function charges a window with one
-- INCRBY instead of a SET PX. The window is the one created_ms falls in
-- (created_ms is its start or the first admission's ms in it). Counts of
-- 10^6 and up, and a negative or far created_ms, keep the packed cells.
local FW_SCALE = 1000000
local FW_CREATED_MAX = 9000000000000

-- Cells {window_start_ms, count, created_ms} of a fixed window's key, or nil.
local function fixed_window_cells(key, period)
  local raw = redis.call('GET', key)
  if not raw then return nil end
  if not tonumber(raw) then return cells_in(key, raw) end
  local created = #raw > 6 and string.sub(raw, 1, -7) + 0 or 0
  return created - created % period, string.sub(raw, -6) + 0, created
end

local function write_fixed_window(key, window, used, created, ttl)
  if used < 0 or used >= FW_SCALE or created < window or created > FW_CREATED_MAX or window < 0 then
    return write_cells(key, window, used, created, ttl)
  end
  local value = fmt(used)
  if created > 0 then value = string.format('%d%06d', created, used) end
  redis.call('SET', key, value, 'PX', expire_after(ttl))
end

-- `max(TAT, now) - now` in scaled units, from cells tat_ms, tat_rem (nil: none).
local function wait_scaled(tat, rem, now, count)
  if not tat then return 0 end
  if tat > now then return (tat - now) * count + rem end
  if tat == now then return rem end
  return 0
end

-- Waits above this (scaled units) deny whatever the policy; below it every
-- sum stays under 2^53. Mirrors gcra::MAX_WAIT_SCALED.
local MAX_WAIT_SCALED = 4503599627370496

-- A TAT more than MAX_WAIT_SCALED ahead (the clock went back by far): the
-- wait as whole ms and a scaled remainder, or nil.
local function far_ahead(tat, rem, now, count)
  if tat and tat > now and tat - now > fdiv(MAX_WAIT_SCALED, count) then
    return tat - now, rem
  end
  return nil
end
