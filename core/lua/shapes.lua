-- The common shapes, one function each (registered beside the general
-- check): one policy on one key, no penalty, adaptive spec, override,
-- shadow, lease or peek. The same algorithm functions as the general path,
-- without its argument walk, dispatch tables and override read.

-- ARGV now_ms ('' = the server's TIME) and the policy's numbers: the decision
-- as {allowed, now, remaining, reset_after_ms, retry_after_ms (-1 = none)}.
local function decide_shape(algorithm, write, keys, now, cost, count, period, burst)
  if now == '' then
    local t = redis.call('TIME')
    now = t[1] * 1000 + math.floor(t[2] / 1000)
  else
    now = now + 0
  end
  local allowed, remaining, reset, retry, _, a, b, c, ttl =
    algorithm(keys, 1, now, cost, count, period, burst, 0)
  if allowed then write(keys[1], a, b, c, ttl) end
  remaining, reset, retry = reply_values(remaining, reset, retry)
  return {allowed and 1 or 0, now, remaining, reset, retry}
end

-- redis.call and the library functions the shape functions use, looked up
-- on their first call: a library's top level cannot see them (it runs
-- before Redis opens them to functions), and a global lookup per use costs
-- the server about 1% of a decision each.
local call, sub, format, pack, unpack
local function bind()
  call, sub, format, pack, unpack = redis.call, string.sub, string.format, struct.pack, struct.unpack
end

-- ARGV: now_ms, cost, period_ms, limit. The common case (now sent, the
-- key empty or holding the one-integer state of now's window or an earlier
-- one, counts below FW_SCALE) answers one integer: the count now's window
-- held before this decision. The client derives the verdict from it with
-- the same rules (fixed_window.rs); a charge is one INCRBY, which keeps the
-- key's expiry (the window's end). Anything else (the server's clock, a
-- clock gone back into an earlier window, packed cells) answers decide_shape's five values.
local function check_fixed_window(keys, argv)
  if not call then bind() end
  local now, cost, period, limit = argv[1], argv[2] + 0, argv[3] + 0, argv[4] + 0
  if now ~= '' and limit < FW_SCALE then
    now = now + 0
    local start = now - now % period
    local raw = call('GET', keys[1])
    local used, window = 0, start
    -- Up to 19 characters: the integer (packed cells take 25 bytes). A
    -- check with tonumber would cost a twentieth of the call: both parts
    -- go through arithmetic instead, so a foreign value raises, and the
    -- client asks the general check, which names the key (scripts.rs).
    if raw and #raw < 20 then
      local created = #raw > 6 and sub(raw, 1, -7) + 0 or 0
      local count = sub(raw, -6) + 0
      window = created - created % period
      if window == start then used = count end
    elseif raw then
      window = now + period -- packed cells: the general form below
    end
    if window <= start and now >= 0 and now <= FW_CREATED_MAX then
      if used + cost <= limit then
        if raw and window == start then
          -- The cost as sent: a number would go through %.17g.
          call('INCRBY', keys[1], argv[2])
        else
          -- write_fixed_window's one-integer case, inline (cost < FW_SCALE,
          -- 0 <= start <= created <= FW_CREATED_MAX).
          local created = raw and start or now
          local value = created > 0 and format('%d%06d', created, cost) or argv[2]
          call('SET', keys[1], value, 'PX', format('%d', start + period - now + TTL_MARGIN_MS))
        end
      end
      return used
    end
  end
  return decide_shape(fixed_window, write_fixed_window, keys, argv[1], cost, 0, period, limit)
end

-- ARGV: now_ms, need (cost * period_ms), count, cap (burst * period_ms):
-- token_bucket's numbers, scaled, so that the whole decision takes four.
-- Answers the tokens (scaled) after the refill to now and before this
-- decision's charge: one integer when now was sent and the key's last refill
-- is not after it (the common case), else {tokens, last_ms, now}. The
-- client derives the verdict from that state by the same rules
-- (token_bucket.rs, like the fixed window's count).
local function check_token_bucket(keys, argv)
  if not call then bind() end
  local now, need, count, cap = argv[1], argv[2] + 0, argv[3] + 0, argv[4] + 0
  local sent = now ~= ''
  if sent then
    now = now + 0
  else
    local t = redis.call('TIME')
    now = t[1] * 1000 + math.floor(t[2] / 1000)
  end
  local key = keys[1]
  local raw = call('GET', key)
  -- token_bucket's rules inline (as token_bucket.lua and token_bucket.rs):
  -- each Lua call here would cost the server 2-3% of the decision.
  local mark, tokens, last, admitted, expires = 0, cap, now, now, false
  if raw then
    if #raw == BUCKET_SIZE then mark, tokens, last, admitted, expires = unpack(BUCKET, raw) end
    if mark ~= BUCKET_MARK then
      tokens, last, admitted = cells_in(key, raw)
      expires = 0
    end
    if now > last then
      -- (now - last) * count: exact below 2^53, and above it past cap anyway.
      tokens = tokens + (now - last) * count
      if tokens > cap then tokens = cap end
      last = now
    elseif last > now then
      expires = false -- the clock went back: its expiry may not cover that
    end
  end
  if tokens >= need and need <= cap then
    if admitted < now then admitted = now end
    -- ceil((cap - tokens + need) / count) by the VM's %, not math.floor.
    local d = cap - tokens + need + count - 1
    if d < count then d = count - 1 end
    local full = last + (d - d % count) / count
    local needed = full + TTL_MARGIN_MS
    if expires and expires >= needed and expires <= needed + TTL_SLACK_MS then
      -- The cells overwritten in place, the expiry kept (the offset as
      -- text: a number would go through %.17g).
      call('SETRANGE', key, '1', pack(BUCKET_CELLS, tokens - need, last, admitted))
    else
      write_bucket(key, tokens - need, last, admitted, full, now, expires)
    end
  end
  if sent and last == now then return tokens end
  return {tokens, last, now}
end

-- ARGV: now_ms, need (cost * period_ms), count, cap (burst * period_ms), as
-- for a token bucket. Answers the wait (scaled: max(TAT, now) - now) before
-- this decision: one integer when now was sent and the TAT is not far ahead
-- (the common case), else {tat_ms, tat_rem, now}, the cells it decided on
-- (now 0 for none). The client derives the verdict from that (gcra.rs). The
-- key's expiry is kept as a token bucket's is (write_bucket): the key lives
-- until the TAT plus the margin.
local function check_gcra(keys, argv)
  if not call then bind() end
  local now, need, count, cap = argv[1], argv[2] + 0, argv[3] + 0, argv[4] + 0
  local sent = now ~= ''
  if sent then
    now = now + 0
  else
    local t = redis.call('TIME')
    now = t[1] * 1000 + math.floor(t[2] / 1000)
  end
  local key = keys[1]
  local raw = call('GET', key)
  -- gcra's rules inline (as gcra.lua and gcra.rs), as for a token bucket.
  local mark, tat, rem, admitted, expires, wait = 0, now, 0, now, false, 0
  if raw then
    if #raw == BUCKET_SIZE then mark, tat, rem, admitted, expires = unpack(BUCKET, raw) end
    if mark ~= BUCKET_MARK then
      tat, rem, admitted = cells_in(key, raw)
      expires = 0
    end
    if tat > now then
      -- Far ahead (far_ahead): it denies, and the client derives how.
      if tat - now > MAX_WAIT_SCALED / count then return {tat, rem, now} end
      wait = (tat - now) * count + rem
    elseif tat == now then
      wait = rem
    end
    if admitted > now then expires = false end -- the clock went back
  end
  local next = wait + need
  if next <= cap and need <= cap then
    if admitted < now then admitted = now end
    local d = next + count - 1
    local full = now + (d - d % count) / count
    local needed = full + TTL_MARGIN_MS
    local rest = next % count
    if expires and expires >= needed and expires <= needed + TTL_SLACK_MS then
      call('SETRANGE', key, '1', pack(BUCKET_CELLS, now + (next - rest) / count, rest, admitted))
    else
      write_bucket(key, now + (next - rest) / count, rest, admitted, full, now, expires)
    end
  end
  if sent then return wait end
  return {tat, rem, now}
end
