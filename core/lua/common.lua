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

local function read_cells(key)
  local raw = redis.call('GET', key)
  if not raw then return nil end
  if #raw == CELLS_SIZE and string.byte(raw, 1) == CELLS_MARK then
    local _, a, b, c = struct.unpack(CELLS, raw)
    return {a, b, c}
  end
  local a, b, c = string.match(raw, '^(%-?%d+) (%-?%d+) (%-?%d+)$')
  if not a then
    error({err = 'POLYLIMIT_STATE key ' .. key .. ' does not hold polylimit state'})
  end
  return {tonumber(a), tonumber(b), tonumber(c)}
end

-- A key lives until it is back to idle, plus a margin: an expired key and an
-- idle one decide alike, and the margin keeps a key alive between the steps
-- of a simulation that passes explicit now_ms while real time moves on.
local TTL_MARGIN_MS = 1000

local function expire_after(ttl)
  if ttl < 0 then ttl = 0 end
  return fmt(ttl + TTL_MARGIN_MS)
end

local function write_cells(key, a, b, c, ttl)
  redis.call('SET', key, struct.pack(CELLS, CELLS_MARK, a, b, c), 'PX', expire_after(ttl))
end

-- `max(TAT, now) - now` in scaled units, from cells {tat_ms, tat_rem}.
local function wait_scaled(c, now, count)
  if not c then return 0 end
  if c[1] > now then return (c[1] - now) * count + c[2] end
  if c[1] == now then return c[2] end
  return 0
end

-- Waits above this (scaled units) deny whatever the policy; below it every
-- sum stays under 2^53. Mirrors gcra::MAX_WAIT_SCALED.
local MAX_WAIT_SCALED = 4503599627370496

-- A TAT more than MAX_WAIT_SCALED ahead (the clock went back by far): the
-- wait as whole ms and a scaled remainder, or nil.
local function far_ahead(c, now, count)
  if c and c[1] > now and c[1] - now > fdiv(MAX_WAIT_SCALED, count) then
    return c[1] - now, c[2]
  end
  return nil
end

local function write_tat(key, now, wait, count, ttl, admitted)
  write_cells(key, now + fdiv(wait, count), wait % count, admitted, ttl)
end
