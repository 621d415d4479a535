-- penalty: cells {blocked_until_ms, level, denials, window_start_ms, last_denial_ms}
local function read_penalty(key)
  local raw = redis.call('GET', key)
  if not raw then return nil end
  local c = {}
  for n in string.gmatch(raw, '%-?%d+') do c[#c + 1] = tonumber(n) end
  if #c ~= 5 then
    error({err = 'POLYLIMIT_STATE key ' .. key .. ' does not hold polylimit state'})
  end
  return c
end

local function blocked_for(c, now)
  if c and c[1] > now then return c[1] - now end
  return 0
end

-- Records a denial; returns the block length it started, or false.
local function record_denial(key, c, now, threshold, within, forget_after, cooldowns)
  local blocked_until, level, denials, window_start = 0, 0, 0, now
  if c then
    -- Only an unblocked key records denials: any block in c is over.
    level, denials, window_start = c[2], c[3], c[4]
    if now > c[5] then
      level = level - fdiv(now - c[5], forget_after)
      if level < 0 then level = 0 end
    end
  end
  if not c or now - window_start >= within then
    window_start = now
    denials = 0
  end
  denials = denials + 1
  local block = false
  if denials >= threshold then
    local i = level + 1
    if i > #cooldowns then i = #cooldowns end
    block = cooldowns[i]
    blocked_until = now + block
    level = level + 1
    if level > #cooldowns then level = #cooldowns end
    denials = 0
    window_start = now
  end
  local ttl = math.max(blocked_until - now, window_start + within - now, level * forget_after)
  redis.call('SET', key, fmt(blocked_until) .. ' ' .. fmt(level) .. ' ' .. fmt(denials) .. ' ' ..
    fmt(window_start) .. ' ' .. fmt(now), 'PX', expire_after(ttl))
  return block
end
