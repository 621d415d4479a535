-- The dispatcher's tables and helpers: defined once, when a function
-- library loads (a script defines them on every call).
local KINDS = {
  token_bucket, token_bucket_interval, gcra, leaky_bucket,
  leaky_bucket_shape, fixed_window, sliding_window_log, sliding_window_counter,
  concurrency,
}
local KEY_COUNT = {1, 1, 1, 1, 1, 1, 2, 1, 1}
-- The kinds whose admission writes more than one key's cells, or other
-- than packed cells (a token bucket's and GCRA's hold their key's expiry too).
local WRITES = {
  [1] = token_bucket_write, [3] = gcra_write, [6] = fixed_window_write, [7] = sliding_window_log_write, [9] = concurrency_write,
}
local STRIDE = 12

-- Clamps a verdict into the reply's form: nothing negative, -1 for no retry.
local function reply_values(remaining, reset, retry)
  if remaining < 0 then remaining = 0 end
  if reset < 0 then reset = 0 end
  if retry then
    if retry < 0 then retry = 0 end
  else
    retry = -1
  end
  return remaining, reset, retry
end

-- Charges an admission: an algorithm returns allowed, remaining, reset,
-- retry, delay and, when allowed, the values to write (a, b, c, ttl: the
-- key's cells and their time to live, or what WRITES[kind] takes).
local function commit(keys, kind, k, now, cost, lease, a, b, c, ttl)
  local write = WRITES[kind]
  if write then return write(keys, k, now, cost, lease, a, b, c, ttl) end
  write_cells(keys[k], a, b, c, ttl)
end
