-- ARGV: now_ms ('' = use the server's TIME), cost, then per policy eleven
-- values: kind, count, period_ms, burst (or limit), max_delay (scaled),
-- flags (1 = shadow: its denial blocks nothing; 2 = peek: decide, charge
-- nothing and record no penalty, set on every policy or none), penalty threshold (0 = none),
-- penalty within_ms, forget_after_ms, cooldowns ("10000,60000"), and the
-- id of the lease an admission takes (concurrency; '' for the others).
-- flags 4 = overrides: the policy's keys end with its override record and
-- the override's state keys (overrides.lua).
-- KEYS: per policy its keys (sliding_window_log takes two), then its penalty
-- key when it has a penalty, then (flags 4) its override record and state keys.
-- With flags 4 the reply ends with three values per policy: the count,
-- period_ms and burst of the override that decided it, or 0 0 0; with the
-- burst negated for a policy-wide limit (overrides.lua). With flags 4 the
-- override keys are followed by the limit's: its record (unless flags 32:
-- then the record's text comes in the lease's place), its generation key
-- and its state keys.
-- The twelfth value is an adaptive spec ('' = none, adaptive.lua): its key
-- comes last among the policy's keys, and the reply then ends with four
-- values per policy: anomalous, transition, estimate, baseline (-1 -1 -1 -1
-- for a policy without). penalized 2 = denied by the adaptive mitigation.
-- Returns {all_allowed, now, then per policy: allowed, remaining,
-- reset_after_ms, retry_after_ms (-1 = none), delay_ms, penalized}.
-- Nothing is charged unless every non-shadow policy allows; penalties record
-- denials either way.
-- Numbers in ARGV are read by arithmetic (`+ 0`, `% 4`): Lua's coercion
-- parses the text once, tonumber twice (lua_isnumber, then lua_tonumber):
-- 25 against 70 ns each, about a tenth of the one-policy path's Lua time.
local now
if ARGV[1] == '' then
  local t = redis.call('TIME')
  now = t[1] * 1000 + math.floor(t[2] / 1000)
else
  now = ARGV[1] + 0
end
local cost = ARGV[2] + 0

-- One policy without a penalty or an adaptive spec, the common case, comes in
-- a short form of nine values: now_ms, cost, kind, count, period_ms, burst,
-- max_delay, flags, lease id (fewer arguments for Redis to parse and Lua to
-- intern: about a tenth of the FCALL's CPU). The same decision without the
-- bookkeeping of several policies (commits held back, penalties).
if #ARGV == 9 then
  local flags = ARGV[8] + 0
  local kind = ARGV[3] + 0
  local n = KEY_COUNT[kind]
  local o = flags >= 4 and read_override(KEYS[1 + n], kind, now)
  local shown = o
  local allowed, remaining, reset, retry, delay, a, b, c, ttl
  local at = 1
  if o then
    at = 2 + n
  elseif flags >= 4 then
    local gen_at
    o, gen_at = read_limit(KEYS, 2 + 2 * n, flags % 64 >= 32 and ARGV[9], kind, now)
    if o then
      enter_limit(KEYS, gen_at, n, o)
      at = gen_at + 1
      shown = {o[1], o[2], -o[3]}
    end
  end
  if o then
    allowed, remaining, reset, retry, delay, a, b, c, ttl = KINDS[kind](KEYS, at, now, cost,
      o[1], o[2], o[3], o[4])
  else
    allowed, remaining, reset, retry, delay, a, b, c, ttl = KINDS[kind](KEYS, 1, now, cost,
      ARGV[4] + 0, ARGV[5] + 0, ARGV[6] + 0, ARGV[7] + 0)
  end
  if allowed and flags % 4 < 2 then commit(KEYS, kind, at, now, cost, ARGV[9], a, b, c, ttl) end
  remaining, reset, retry = reply_values(remaining, reset, retry)
  local all = (allowed or flags % 2 == 1) and 1 or 0
  if flags < 4 then
    return {all, now, allowed and 1 or 0, remaining, reset, retry, delay, 0}
  end
  shown = shown or {0, 0, 0}
  return {all, now, allowed and 1 or 0, remaining, reset, retry, delay, 0, shown[1], shown[2], shown[3]}
end

local out = {1, now}
local peek = ARGV[8] % 4 >= 2
local overridden = {}
local commits = {}
local penalties = {}
local adaptives = {}
local any_adaptive = false
local k = 1
for b = 3, #ARGV, STRIDE do
  local kind = ARGV[b] + 0
  local shadow = ARGV[b + 5] % 2 == 1
  local threshold = ARGV[b + 6] + 0
  local pkey, pstate = false, nil
  local keys_at = k
  k = k + KEY_COUNT[kind]
  if threshold > 0 then
    pkey = KEYS[k]
    k = k + 1
    pstate = read_penalty(pkey)
  end
  local count, period, burst, max_delay =
    ARGV[b + 1] + 0, ARGV[b + 2] + 0, ARGV[b + 3] + 0, ARGV[b + 4] + 0
  local flags = ARGV[b + 5] + 0
  if flags >= 4 then
    local n = KEY_COUNT[kind]
    local o = read_override(KEYS[k], kind, now)
    local l, gen_at = nil, nil
    if not o then
      l, gen_at = read_limit(KEYS, k + 1 + n, flags % 64 >= 32 and ARGV[b + 10], kind, now)
    end
    if o then
      keys_at = k + 1
      count, period, burst, max_delay = o[1], o[2], o[3], o[4]
      overridden[#overridden + 1] = o
    elseif l then
      enter_limit(KEYS, gen_at, n, l)
      keys_at = gen_at + 1
      count, period, burst, max_delay = l[1], l[2], l[3], l[4]
      overridden[#overridden + 1] = {l[1], l[2], -l[3]}
    else
      overridden[#overridden + 1] = {0, 0, 0}
    end
    k = k + 1 + n + (flags % 64 >= 32 and 0 or 1) + 1 + n
  end
  local astep = false
  if ARGV[b + 11] ~= '' then
    any_adaptive = true
    local ap = adaptive_spec(ARGV[b + 11])
    astep = adaptive_step(ap, read_adaptive(KEYS[k]), now, cost)
    astep[5] = KEYS[k]
    astep[6] = ap
    k = k + 1
  end
  adaptives[#adaptives + 1] = astep
  local allowed, remaining, reset, retry, delay, w1, w2, w3, ttl
  local penalized = 0
  local blocked = blocked_for(pstate, now)
  if blocked > 0 then
    allowed, remaining, reset, retry, delay, penalized = false, 0, blocked, blocked, 0, 1
  elseif astep and astep[2] then
    allowed, remaining, reset, retry, delay, penalized = false, 0, astep[2], astep[2], 0, 2
  else
    allowed, remaining, reset, retry, delay, w1, w2, w3, ttl = KINDS[kind](KEYS, keys_at, now, cost,
      count, period, burst, max_delay)
  end
  local at = #out + 1
  if allowed then
    commits[#commits + 1] = {kind, keys_at, ARGV[b + 10], w1, w2, w3, ttl}
  elseif not shadow then
    out[1] = 0
  end
  remaining, reset, retry = reply_values(remaining, reset, retry)
  out[at], out[at + 1], out[at + 2], out[at + 3], out[at + 4], out[at + 5] =
    allowed and 1 or 0, remaining, reset, retry, delay, penalized
  if not allowed and blocked == 0 and penalized == 0 and pkey and not peek then
    penalties[#penalties + 1] = {at, pkey, pstate, threshold, ARGV[b + 7] + 0, ARGV[b + 8] + 0, ARGV[b + 9]}
  end
end
if out[1] == 1 and not peek then
  for _, w in ipairs(commits) do commit(KEYS, w[1], w[2], now, cost, w[3], w[4], w[5], w[6], w[7]) end
end
for _, p in ipairs(penalties) do
  local cooldowns = {}
  for n in string.gmatch(p[7], '%d+') do cooldowns[#cooldowns + 1] = tonumber(n) end
  local block = record_denial(p[2], p[3], now, p[4], p[5], p[6], cooldowns)
  if block then
    local at = p[1]
    out[at + 1] = 0
    if out[at + 2] < block then out[at + 2] = block end
    out[at + 3] = block
    out[at + 5] = 1
  end
end
for _, o in ipairs(overridden) do
  local n = #out
  out[n + 1], out[n + 2], out[n + 3] = o[1], o[2], o[3]
end
if any_adaptive then
  for _, a in ipairs(adaptives) do
    local n = #out
    if a then
      if not peek then write_adaptive(a[5], a[6], a[1], out[1] == 1, cost) end
      out[n + 1], out[n + 2], out[n + 3], out[n + 4] = a[1][6], peek and 0 or a[3], a[4], a[1][4]
    else
      out[n + 1], out[n + 2], out[n + 3], out[n + 4] = -1, -1, -1, -1
    end
  end
end
return out
