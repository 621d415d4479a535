-- Per-key overrides (core/src/overrides.rs): a record beside a key's state,
-- under the same hash tag: "o1 <count> <period_ms> <burst> <max_delay> <until_ms>"
-- (until 0: no end). While it is in force (now < until), the key is decided
-- with its numbers, on state keys of its own (the record's key, then its
-- state keys: `:o`, `:o:log`), so the policy's state is never read with other
-- numbers. Anything else under the record's key (foreign data, another type)
-- is no override: a check never fails because of it.
local OVERRIDE_MAX = 1125899906842624 -- 2^50, policy.rs MAX_SCALED
local OVERRIDE_MAX_LOG = 100000 -- policy.rs MAX_LOG_ENTRIES

-- The override in force for a key of `kind` at `now`: {count, period, burst, max_delay}, or nil.
local function read_override(key, kind, now)
  local raw = redis.pcall('GET', key)
  if type(raw) ~= 'string' then return nil end
  local c, p, b, d, u = string.match(raw, '^o1 (%d+) (%d+) (%d+) (%d+) (%d+)$')
  if not c then return nil end
  c, p, b, d, u = tonumber(c), tonumber(p), tonumber(b), tonumber(d), tonumber(u)
  if c < 1 or p < 1 or b < 1 or c > OVERRIDE_MAX or p > OVERRIDE_MAX or b * p > OVERRIDE_MAX
    or d > OVERRIDE_MAX or u > OVERRIDE_MAX or (kind == 7 and b > OVERRIDE_MAX_LOG) then
    return nil
  end
  if u > 0 and now >= u then return nil end
  return {c, p, b, d}
end

-- Policy-wide limits (core/src/limits.rs): one record per policy,
-- "l1 <count> <period_ms> <burst> <max_delay> <until_ms> <generation>", read
-- from a key on a single server, given in ARGV on a cluster (flags 32).
-- While it is in force and no per-key override is, a key is decided with its
-- numbers on state keys of its own, after a key naming the generation that
-- state belongs to: a check under another generation drops that state first.
-- Anything else is no limit. Concurrency policies take none (kind 9).
local function parse_limit(raw, kind, now)
  if type(raw) ~= 'string' or kind == 9 then return nil end
  local c, p, b, d, u, g = string.match(raw, '^l1 (%d+) (%d+) (%d+) (%d+) (%d+) (%d+)$')
  if not c or #g > 20 then return nil end
  c, p, b, d, u = tonumber(c), tonumber(p), tonumber(b), tonumber(d), tonumber(u)
  if c < 1 or p < 1 or b < 1 or c > OVERRIDE_MAX or p > OVERRIDE_MAX or b * p > OVERRIDE_MAX
    or d > OVERRIDE_MAX or u > OVERRIDE_MAX or (kind == 7 and b > OVERRIDE_MAX_LOG) then
    return nil
  end
  if u > 0 and now >= u then return nil end
  return {c, p, b, d, g}
end

-- The limit in force, and the position of its generation key: the record is
-- KEYS[at] unless `inline` (the record's text, or false) is given.
local function read_limit(keys, at, inline, kind, now)
  if inline then return parse_limit(inline, kind, now), at end
  return parse_limit(redis.pcall('GET', keys[at]), kind, now), at + 1
end

-- Makes the `n` state keys after keys[gen_at] hold limit `l`'s generation's
-- state (dropping another's), and keeps the generation key as long as that
-- state may matter.
local function enter_limit(keys, gen_at, n, l)
  if redis.pcall('GET', keys[gen_at]) ~= l[5] then
    for i = 1, n do redis.call('DEL', keys[gen_at + i]) end
  end
  local full = math.ceil(l[3] * l[2] / l[1])
  if full < l[2] then full = l[2] end
  redis.call('SET', keys[gen_at], l[5], 'PX', 4 * full + 1000)
end
