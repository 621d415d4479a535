-- leaky_bucket (police): cells {level * period, last_ms, admitted_ms}
local function leaky_bucket(keys, k, now, cost, count, period, burst)
  local key = keys[k]
  local cap = burst * period
  local level, last, admitted = 0, now, now
  local c = read_cells(key)
  if c then level, last, admitted = c[1], c[2], math.max(c[3], now) end
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
    return true, fdiv(cap - level, period), reset, false, 0,
      function() write_cells(key, level, last, admitted, reset) end
  end
  return false, fdiv(cap - level, period), lag + ceil_div(level, count), lag + ceil_div(level + need - cap, count), 0
end

-- leaky_bucket (shape): the queue's tail as a TAT; admitted iff wait <= max_delay
local function leaky_bucket_shape(keys, k, now, cost, count, period, burst, max_delay)
  local key = keys[k]
  local c = read_cells(key)
  local far_ms, far_rem = far_ahead(c, now, count)
  if far_ms then
    -- The queue's tail is further ahead than any max_delay: full.
    local reset = far_ms + ceil_div(far_rem, count)
    if cost > burst then return false, 0, reset, false, 0 end
    return false, 0, reset, far_ms + ceil_frac(far_rem - max_delay, count), 0
  end
  local wait = wait_scaled(c, now, count)
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
    if c then admitted = math.max(c[3], now) end
    return true, room(next), reset, false, ceil_div(wait, count),
      function() write_tat(key, now, next, count, reset, admitted) end
  end
  return false, 0, ceil_div(wait, count), ceil_div(wait - max_delay, count), 0
end
