-- token_bucket (continuous): cells {tokens * period, last_ms, admitted_ms}
local function token_bucket(keys, k, now, cost, count, period, burst)
  local cap = burst * period
  local tokens, last, admitted = cap, now, now
  local t, l, a = cells_of(keys[k])
  if t then tokens, last, admitted = t, l, math.max(a, now) end
  if now > last then
    if now - last >= ceil_div(cap - tokens, count) then
      tokens = cap
    else
      tokens = tokens + (now - last) * count
    end
    last = now
  end
  local lag = last - now
  -- A denial returns the cells too (unwritten): the shape function answers them.
  if cost > burst then
    return false, fdiv(tokens, period), lag + ceil_div(cap - tokens, count), false, 0, tokens, last
  end
  local need = cost * period
  if tokens >= need then
    tokens = tokens - need
    local reset = lag + ceil_div(cap - tokens, count)
    return true, fdiv(tokens, period), reset, false, 0, tokens, last, admitted, reset
  end
  return false, fdiv(tokens, period), lag + ceil_div(cap - tokens, count), lag + ceil_div(need - tokens, count), 0,
    tokens, last
end

-- Writes an admission's cells (write_bucket: the key's expiry with them).
local function token_bucket_write(keys, k, now, cost, lease, tokens, last, admitted, reset)
  write_bucket(keys[k], tokens, last, admitted, now + reset, now, false)
end

-- token_bucket (refill: interval): cells {tokens, last_refill_ms, admitted_ms}
local function token_bucket_interval(keys, k, now, cost, count, period, burst)
  local tokens, last, admitted = burst, now, now
  local t, l, a = cells_of(keys[k])
  if t then tokens, last, admitted = t, l, math.max(a, now) end
  if now > last then
    local periods = fdiv(now - last, period)
    if periods >= ceil_div(burst - tokens, count) then
      tokens = burst
    else
      tokens = tokens + periods * count
      last = last + periods * period
    end
    if tokens >= burst then
      tokens = burst
      last = now
    end
  end
  local function time_for(more)
    if more <= 0 then return 0 end
    return last + ceil_div(more, count) * period - now
  end
  if cost > burst then
    return false, tokens, time_for(burst - tokens), false, 0
  end
  if tokens >= cost then
    tokens = tokens - cost
    local reset = time_for(burst - tokens)
    return true, tokens, reset, false, 0, tokens, last, admitted, reset
  end
  return false, tokens, time_for(burst - tokens), time_for(cost - tokens), 0
end
