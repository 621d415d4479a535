-- adaptive: per-key baseline, anomaly detection and mitigation. Mirrors
-- core/src/algorithm/adaptive.rs line for line (see there for the model).
-- Cells {window_start, cur, prev, base, since, anomalous, admitted}; spec
-- 'window,n,factor_centi,floor,min'. Every product stays below 2^53.
local ADAPTIVE = '<Blllllll'
local ADAPTIVE_MARK = 7
local ADAPTIVE_SIZE = 57
local ADAPTIVE_CAP = 16777216
local ADAPTIVE_SCALE = 1000

local function read_adaptive(key)
  local raw = redis.call('GET', key)
  if not raw then return nil end
  if #raw ~= ADAPTIVE_SIZE or string.byte(raw, 1) ~= ADAPTIVE_MARK then
    error({err = 'POLYLIMIT_STATE key ' .. key .. ' does not hold polylimit state'})
  end
  local _, a, b, c, d, e, f, g = struct.unpack(ADAPTIVE, raw)
  return {a, b, c, d, e, f, g}
end

local function adaptive_spec(text)
  local s = {}
  for n in string.gmatch(text, '%d+') do s[#s + 1] = tonumber(n) end
  return {window = s[1], n = s[2], factor = s[3], floor = s[4], min = s[5]}
end

local function adaptive_fold(p, base, count)
  if count > ADAPTIVE_CAP then count = ADAPTIVE_CAP end
  return fdiv(base * (p.n - 1) + count * ADAPTIVE_SCALE, p.n)
end

-- Counts a request of `cost` at `now`; returns {cells, deny_retry or false,
-- transition (0 none, 1 anomalous, 2 recovered), estimate}.
local function adaptive_step(p, c, now, cost)
  local w = p.window
  local ws_now = now - now % w
  local ws, cur, prev, base, since, anom, adm
  if c then
    ws, cur, prev, base, since, anom, adm = c[1], c[2], c[3], c[4], c[5], c[6], c[7]
  else
    ws, cur, prev, base, since, anom, adm = ws_now, 0, 0, 0, ws_now, 0, 0
  end
  if ws_now > ws then
    local k = fdiv(ws_now - ws, w)
    if anom == 0 then
      base = adaptive_fold(p, base, cur)
      local idle = k - 1
      if idle > 4 * p.n + 2 then idle = 4 * p.n + 2 end
      for _ = 1, idle do base = adaptive_fold(p, base, 0) end
    end
    if k == 1 then prev = cur else prev = 0 end
    cur = 0
    adm = 0
    ws = ws_now
  end
  cur = cur + cost
  if cur > ADAPTIVE_CAP then cur = ADAPTIVE_CAP end
  local elapsed = now - ws
  if elapsed < 0 then elapsed = 0 end
  if elapsed > w - 1 then elapsed = w - 1 end
  local est = fdiv(prev * (w - elapsed), w) + cur
  local warm = now - since >= p.n * w
  local hot = est >= p.floor and est * ADAPTIVE_SCALE * 100 > p.factor * base
  local cool = est * 2 < p.floor or est * ADAPTIVE_SCALE * 200 <= p.factor * base
  local transition = 0
  if anom == 0 and warm and hot then
    anom = 1
    adm = 0
    transition = 1
  elseif anom == 1 and cool then
    anom = 0
    transition = 2
  end
  local deny = false
  if anom == 1 then
    local cap = ceil_div(base, ADAPTIVE_SCALE)
    if cap < p.min then cap = p.min end
    if adm + cost > cap then deny = ws + w - now end
  end
  return {{ws, cur, prev, base, since, anom, adm}, deny, transition, est}
end

local function write_adaptive(key, p, c, charged, cost)
  if charged and c[6] == 1 then
    c[7] = c[7] + cost
    if c[7] > ADAPTIVE_CAP then c[7] = ADAPTIVE_CAP end
  end
  redis.call('SET', key, struct.pack(ADAPTIVE, ADAPTIVE_MARK, c[1], c[2], c[3], c[4], c[5], c[6], c[7]),
    'PX', expire_after(p.window * (4 * p.n + 2)))
end
