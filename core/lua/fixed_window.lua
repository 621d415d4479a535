-- fixed_window: cells {window_start_ms, count, created_ms} (fixed_window.rs),
-- stored as one integer when they fit (common.lua: fixed_window_cells).
local function fixed_window(keys, k, now, cost, count, period, limit)
  local start = now - now % period
  local window, used, created = start, 0, now
  local w, u, c = fixed_window_cells(keys[k], period)
  if w then window, used, created = w, u, c end
  if start > window then
    window = start
    used = 0
    created = start
  end
  local window_end = window + period - now
  local reset = 0
  if used > 0 then reset = window_end end
  if cost > limit then
    return false, limit - used, reset, false, 0
  end
  if used + cost <= limit then
    used = used + cost
    return true, limit - used, window_end, false, 0, window, used, created, window_end
  end
  return false, limit - used, reset, window_end, 0
end

local function fixed_window_write(keys, k, now, cost, lease, window, used, created, ttl)
  write_fixed_window(keys[k], window, used, created, ttl)
end
