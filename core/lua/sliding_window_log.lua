-- sliding_window_log: KEYS[k] holds cells {sum, seq}, KEYS[k+1] a sorted set
-- of admissions scored by time, member "<seq>:<cost>".
local function entry_cost(member)
  return tonumber(string.match(member, ':(%d+)$'))
end

local function sliding_window_log(keys, k, now, cost, count, period, limit)
  local key, log = keys[k], keys[k + 1]
  local cutoff = now - period
  local c = read_cells(key)
  local used, seq, newest = 0, 0, false
  if c then
    used, seq = c[1], c[2]
    for _, m in ipairs(redis.call('ZRANGEBYSCORE', log, '-inf', fmt(cutoff))) do
      used = used - entry_cost(m)
    end
    local last = redis.call('ZREVRANGE', log, 0, 0, 'WITHSCORES')
    if last[2] and tonumber(last[2]) > cutoff then newest = tonumber(last[2]) end
  end
  local function reset(t)
    if t then return t + period - now end
    return 0
  end
  if cost > limit then
    return false, limit - used, reset(newest), false, 0
  end
  if used + cost <= limit then
    local top = now
    if newest and newest > now then top = newest end
    local ttl = reset(top)
    return true, limit - used - cost, ttl, false, 0, function()
      if c then
        redis.call('ZREMRANGEBYSCORE', log, '-inf', fmt(cutoff))
      else
        redis.call('DEL', log)
      end
      redis.call('ZADD', log, fmt(now), fmt(seq + 1) .. ':' .. fmt(cost))
      redis.call('PEXPIRE', log, expire_after(ttl))
      write_cells(key, used + cost, seq + 1, 0, ttl)
    end
  end
  -- The oldest live entries expire first: find the one that makes room.
  local freed, offset, retry = 0, 0, false
  while not retry do
    local page = redis.call('ZRANGEBYSCORE', log, '(' .. fmt(cutoff), '+inf', 'WITHSCORES', 'LIMIT', offset, 64)
    if #page == 0 then break end
    for i = 1, #page, 2 do
      freed = freed + entry_cost(page[i])
      if used - freed + cost <= limit then
        retry = tonumber(page[i + 1]) + period - now
        break
      end
    end
    offset = offset + 64
  end
  return false, limit - used, reset(newest), retry, 0
end
