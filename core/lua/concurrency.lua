-- concurrency: KEYS[k] is a sorted set of lease slots scored by the lease's
-- end (ms); a lease of n slots is n members: its id, then id#2 ... id#n.
-- Live slots score above now. `count` and `limit` are the limit, `period`
-- the lease. Mirrors core/src/algorithm/concurrency.rs.
local function lease_members(id, slots)
  local members = {id}
  for i = 2, slots do members[i] = id .. '#' .. fmt(i) end
  return members
end

-- ZADD or ZREM of many members, a thousand at a time (Lua's stack is bounded).
local function in_chunks(command, key, members, score)
  local done = 0
  for first = 1, #members, 1000 do
    local args = {}
    for i = first, math.min(first + 999, #members) do
      if score then args[#args + 1] = score end
      args[#args + 1] = members[i]
    end
    done = done + redis.call(command, key, unpack(args))
  end
  return done
end

local function concurrency(keys, k, now, cost, count, period, limit)
  local key = keys[k]
  local in_flight = redis.call('ZCOUNT', key, '(' .. fmt(now), '+inf')
  local latest = false
  if in_flight > 0 then
    latest = tonumber(redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')[2])
  end
  local reset = 0
  if latest then reset = latest - now end
  if cost > limit then
    return false, limit - in_flight, reset, false, 0
  end
  if in_flight + cost <= limit then
    local expires = now + period
    local top = expires
    if latest and latest > top then top = latest end
    return true, limit - in_flight - cost, top - now, false, 0, expires, nil, nil, top - now
  end
  -- The slot whose end frees `need` slots (with all ending before it).
  local need = in_flight + cost - limit
  local at = redis.call('ZRANGEBYSCORE', key, '(' .. fmt(now), '+inf', 'WITHSCORES', 'LIMIT', fmt(need - 1), 1)
  return false, limit - in_flight, reset, tonumber(at[2]) - now, 0
end

-- An admission's writes: the lease's slots until `expires`, the ended ones dropped.
local function concurrency_write(keys, k, now, cost, lease, expires, _, _, ttl)
  local key = keys[k]
  redis.call('ZREMRANGEBYSCORE', key, '-inf', fmt(now))
  in_chunks('ZADD', key, lease_members(lease, cost), fmt(expires))
  redis.call('PEXPIRE', key, expire_after(ttl))
end
