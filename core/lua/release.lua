-- polylimit: releases concurrency leases (core/lua/concurrency.lua).
-- KEYS: the leases' sorted sets. ARGV: now_ms ('' = the server's TIME), then
-- per key the lease id and the policy's limit. A lease of n > 1 slots has
-- an id ending in "*<n>"; an id claiming more slots than the limit is no
-- lease of ours and is left alone. Returns how many leases were live (an
-- ended lease's slots go too, but they counted no more).
local now
if ARGV[1] == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
else
  now = tonumber(ARGV[1])
end
local released = 0
for i = 1, #KEYS do
  local id, limit = ARGV[2 * i], tonumber(ARGV[2 * i + 1])
  local slots = tonumber(string.match(id, '%*(%d+)$')) or 1
  if slots <= limit then
    local score = redis.call('ZSCORE', KEYS[i], id)
    if score then
      in_chunks('ZREM', KEYS[i], lease_members(id, slots), false)
      if tonumber(score) > now then released = released + 1 end
    end
  end
end
return released
