-- leaky_bucket (police): cells {level * period, last_ms, admitted_ms}
local function leaky_bucket(keys, k, now, cost, count, period, burst)
  local cap = burst * period
  local level, last, admitted = 0, now, now
  local v, l, a = cells_of(keys[k])
  if v then level, last, admitted = v, l, math.max(a, now) end
  if now > last then
    if now - last >= ceil_div(level, count) then
      level = 0
    else
      level = level - (now - last) * count
    end
    last = now
  end
  local lag = last - now
  if cost > burst then
    return false, fdiv(cap - level, period), lag + ceil_div(level, count), false, 0
  end
  local need = cost * period
  if level + need <= cap then
    level = level + need
    local reset = lag + ceil_div(level, count)
    return true, fdiv(cap - level, period), reset, false, 0, level, last, admitted, reset
  end
  return false, fdiv(cap - level, period), lag + ceil_div(level, count), lag + ceil_div(level + need - cap, count), 0
end

-- leaky_bucket (shape): the queue's tail as a TAT; admitted iff wait <= max_delay
local function leaky_bucket_shape(keys, k, now, cost, count, period, burst, max_delay)
  local tat, rem, adm = cells_of(keys[k])
  local far_ms, far_rem = far_ahead(tat, rem, now, count)
  if far_ms then
    -- The queue's tail is further ahead than any max_delay: full.
    local reset = far_ms + ceil_div(far_rem, count)
    if cost > burst then return false, 0, reset, false, 0 end
    return false, 0, reset, far_ms + ceil_frac(far_rem - max_delay, count), 0
  end
  local wait = wait_scaled(tat, rem, now, count)
  local function room(w)
    if w <= max_delay then return fdiv(max_delay - w, period) + 1 end
    return 0
  end
  if cost > burst then
    return false, room(wait), ceil_div(wait, count), false, 0
  end
  if wait <= max_delay then
    local next = wait + cost * period
    local reset = ceil_div(next, count)
    local admitted = now
    if tat then admitted = math.max(adm, now) end
    return true, room(next), reset, false, ceil_div(wait, count),
      now + fdiv(next, count), next % count, admitted, reset
  end
  return false, 0, ceil_div(wait, count), ceil_div(wait - max_delay, count), 0
end
