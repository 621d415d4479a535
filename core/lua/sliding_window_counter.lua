-- sliding_window_counter: cells {created_ms, previous, current}; the
-- window's start is created_ms - created_ms % period (sliding_window_counter.rs)
local function sliding_window_counter(keys, k, now, cost, count, period, limit)
  local start = now - now % period
  local window, previous, current, created = start, 0, 0, now
  local w, p, c = cells_of(keys[k])
  if w then window, previous, current, created = w - w % period, p, c, w end
  if start > window then
    if start == window + period then previous = current else previous = 0 end
    current = 0
    window = start
    created = start
  end
  local elapsed = now - window
  if elapsed < 0 then elapsed = 0 end
  local weighted_previous = previous * (period - elapsed)
  local function remaining(cur)
    return fdiv(limit * period - weighted_previous, period) - cur
  end
  local function reset(cur)
    if cur > 0 then return window + 2 * period - now end
    if previous > 0 then return window + period - now end
    return 0
  end
  if cost > limit then
    return false, remaining(current), reset(current), false, 0
  end
  if weighted_previous + (current + cost) * period <= limit * period then
    current = current + cost
    local ttl = reset(current)
    return true, remaining(current), ttl, false, 0, created, previous, current, ttl
  end
  local room = limit - current - cost
  local retry
  if room >= 0 then
    retry = period - fdiv(room * period, previous) - elapsed
  else
    retry = window + period - now + period - fdiv((limit - cost) * period, current)
  end
  return false, remaining(current), reset(current), retry, 0
end
