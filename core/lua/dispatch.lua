-- The dispatcher's tables and helpers: defined once, when a function
-- library loads (a script defines them on every call).
local KINDS = {
  token_bucket, token_bucket_interval, gcra, leaky_bucket,
  leaky_bucket_shape, fixed_window, sliding_window_log, sliding_window_counter,
  concurrency,
}
local KEY_COUNT = {1, 1, 1, 1, 1, 1, 2, 1, 1}
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
