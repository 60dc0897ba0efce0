-- Extend many held locks and permits in one round trip.
--
-- KEYS[2i - 1]   what is held: a lock hash, or a sorted set of holders
-- KEYS[2i]       a key that must live as long (for a sorted set, its
--                companion hash; for a lock hash, the hash again)
-- ARGV[3i - 2]   "x" for a lock hash, "z" for a member of a sorted set
-- ARGV[3i - 1]   the owner id expected
-- ARGV[3i]       the lease in milliseconds
--
-- A renewal never shortens what Redis holds: a nested acquisition may have
-- lengthened the lease after this batch was built, with a longer lease than
-- the one this batch carries.
--
-- Returns one integer per item: 1 renewed, 0 no longer held by that owner.
local result = {}
local now = nil
for i = 1, #KEYS / 2 do
  local key, companion = KEYS[2 * i - 1], KEYS[2 * i]
  local kind, owner, lease = ARGV[3 * i - 2], ARGV[3 * i - 1], tonumber(ARGV[3 * i])
  -- pcall: a key overwritten with another type must fail alone, not the
  -- whole batch (its error reply never equals an owner id).
  result[i] = 0
  if kind == 'x' then
    -- A lock released with a minimum hold (count 0, see release.lua) is
    -- no longer its owner's to renew: a renewal sent before the release
    -- and arriving after it must not stretch the minimum to a lease.
    local held = redis.pcall('HMGET', key, 'owner', 'count')
    if type(held) == 'table' and held[1] == owner and held[2] ~= '0' then
      keep_for(key, lease)
      result[i] = 1
    end
  else
    now = now or now_ms()
    local score = redis.pcall('ZSCORE', key, owner)
    if type(score) == 'string' and tonumber(score) > now then
      redis.call('ZADD', key, 'GT', now + lease, owner)
      keep_for(key, lease)
      keep_for(companion, lease)
      result[i] = 1
    end
  end
end
return result
