-- gcra: cells {tat_ms, tat_rem, admitted_ms}; allowed iff wait + cost*T <= burst*T
local function gcra(keys, k, now, cost, count, period, burst)
  local cap = burst * period
  local tat, rem, adm = cells_of(keys[k])
  local far_ms, far_rem = far_ahead(tat, rem, now, count)
  if far_ms then
    local reset = far_ms + ceil_div(far_rem, count)
    if cost > burst then return false, 0, reset, false, 0 end
    return false, 0, reset, far_ms + ceil_frac(far_rem + cost * period - cap, count), 0
  end
  local wait = wait_scaled(tat, rem, now, count)
  if cost > burst then
    return false, fdiv(cap - wait, period), ceil_div(wait, count), false, 0
  end
  local need = cost * period
  if wait + need <= cap then
    local next = wait + need
    local reset = ceil_div(next, count)
    local admitted = now
    if tat then admitted = math.max(adm, now) end
    return true, fdiv(cap - next, period), reset, false, 0,
      now + fdiv(next, count), next % count, admitted, reset
  end
  return false, fdiv(cap - wait, period), ceil_div(wait, count), ceil_div(wait + need - cap, count), 0
end

-- Writes an admission's cells with the key's expiry (write_bucket).
local function gcra_write(keys, k, now, cost, lease, tat, rem, admitted, reset)
  write_bucket(keys[k], tat, rem, admitted, now + reset, now, false)
end
