-- Several decisions in one call (the function library only). ARGV holds,
-- per decision, its key count, its argument count, then its arguments (as
-- check.lua reads them); KEYS holds the decisions' keys one after the other.
-- Each decision runs through check() in turn, under pcall: an error (a key
-- holding foreign data) fails that decision alone. Returns one reply per
-- decision, in order: check()'s array, or the error it raised.
-- Decisions on the server's clock (now_ms '') share one TIME: the batch is
-- one atomic call, so they happen at one instant anyway.
local function batch(KEYS, ARGV)
  local out = {}
  local keys, args = {}, {}
  local nk, na = 0, 0
  local now
  local k, a, n = 0, 1, #ARGV
  while a <= n do
    local nkeys, nargs = ARGV[a] + 0, ARGV[a + 1] + 0 -- `+ 0`: see check.lua
    for i = 1, nkeys do keys[i] = KEYS[k + i] end
    for i = nkeys + 1, nk do keys[i] = nil end
    for i = 1, nargs do args[i] = ARGV[a + 1 + i] end
    for i = nargs + 1, na do args[i] = nil end
    nk, na = nkeys, nargs
    k = k + nkeys
    a = a + 2 + nargs
    if args[1] == '' then
      if not now then
        local t = redis.call('TIME')
        now = tostring(tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))
      end
      args[1] = now
    end
    local ok, reply = pcall(check, keys, args)
    if ok then
      out[#out + 1] = reply
    elseif type(reply) == 'table' and reply.err then
      out[#out + 1] = reply
    else
      -- A redis.call error or an error({err = ...}) reaches pcall as its
      -- text ('WRONGTYPE ...', 'POLYLIMIT_STATE ...'): keep its code; a Lua
      -- runtime error ('user_function:12: ...') has none.
      reply = tostring(reply)
      out[#out + 1] = {err = string.find(reply, '^%u[%u_]* ') and reply or 'ERR ' .. reply}
    end
  end
  return out
end
