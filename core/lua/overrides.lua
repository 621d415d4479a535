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
