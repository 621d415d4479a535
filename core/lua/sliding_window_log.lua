-- sliding_window_log: KEYS[k] holds cells {sum, seq}, KEYS[k+1] a sorted set
-- of admissions scored by time, member "<seq>:<cost>". Live entries cost at
-- least 1 each and at most `limit` in all, so a key never holds more than
-- `limit` live entries; each admission drops the expired ones.
local function entry_cost(member)
  return tonumber(string.match(member, ':(%d+)$'))
end

local function sliding_window_log(keys, k, now, cost, count, period, limit)
  local log = keys[k + 1]
  local cutoff = now - period
  local s, q = cells_of(keys[k])
  local used, seq, newest = 0, 0, false
  if s then
    used, seq = s, q
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
    return true, limit - used - cost, ttl, false, 0, used + cost, seq + 1, s and cutoff, ttl
  end
  -- The oldest live entries expire first: find the one whose expiry makes
  -- room. Every entry costs at least 1, so it is among the `need` oldest live
  -- entries, and among the `limit - cost + 1` newest (what stays live after it
  -- fits beside `cost`): one bounded range query from the nearer end.
  local need = used + cost - limit
  local keep = limit - cost
  local retry = false
  if need <= keep + 1 then
    local freed = 0
    local page = redis.call('ZRANGEBYSCORE', log, '(' .. fmt(cutoff), '+inf', 'WITHSCORES', 'LIMIT', 0, fmt(need))
    for i = 1, #page, 2 do
      freed = freed + entry_cost(page[i])
      if freed >= need then
        retry = tonumber(page[i + 1]) + period - now
        break
      end
    end
  else
    local kept = 0
    local page = redis.call('ZREVRANGEBYSCORE', log, '+inf', '(' .. fmt(cutoff), 'WITHSCORES', 'LIMIT', 0, fmt(keep + 1))
    for i = 1, #page, 2 do
      kept = kept + entry_cost(page[i])
      if kept > keep then
        retry = tonumber(page[i + 1]) + period - now
        break
      end
    end
  end
  return false, limit - used, reset(newest), retry, 0
end

-- An admission's writes: its entry, the expired ones dropped (the whole log
-- when the key held no cells: cutoff nil), then cells {sum, seq}.
local function sliding_window_log_write(keys, k, now, cost, _, sum, seq, cutoff, ttl)
  local log = keys[k + 1]
  if cutoff then
    redis.call('ZREMRANGEBYSCORE', log, '-inf', fmt(cutoff))
  else
    redis.call('DEL', log)
  end
  redis.call('ZADD', log, fmt(now), fmt(seq) .. ':' .. fmt(cost))
  redis.call('PEXPIRE', log, expire_after(ttl))
  write_cells(keys[k], sum, seq, 0, ttl)
end
