-- gcra: cells {tat_ms, tat_rem}; allowed iff wait + cost*T <= burst*T
local function gcra(keys, k, now, cost, count, period, burst)
  local key = keys[k]
  local cap = burst * period
  local wait = wait_scaled(read_cells(key), now, count)
  if cost > burst then
    return false, fdiv(cap - wait, period), ceil_div(wait, count), false, 0
  end
  local need = cost * period
  if wait + need <= cap then
    local next = wait + need
    local reset = ceil_div(next, count)
    return true, fdiv(cap - next, period), reset, false, 0,
      function() write_tat(key, now, next, count, reset) end
  end
  return false, fdiv(cap - wait, period), ceil_div(wait, count), ceil_div(wait + need - cap, count), 0
end
