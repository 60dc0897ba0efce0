-- Take, re-enter, or report who holds a lock, atomically.
--
-- KEYS[1]  the lock hash: owner, count, fence
-- KEYS[2]  the fencing counter of the lock's hash slot (see keys.rs)
-- ARGV[1]  owner id (client uuid : scope id)
-- ARGV[2]  lease in milliseconds
--
-- Returns {1, fence, count} when the caller holds the lock afterwards,
-- or {0, pttl, 0} with the holder's remaining time to live otherwise.
local owner = redis.call('HGET', KEYS[1], 'owner')
if not owner then
  local fence = redis.call('INCR', KEYS[2])
  if fence == 1 then
    -- A new counter: first use of this slot, or the server lost its data
    -- (restart without persistence, eviction). Start from the server clock
    -- in microseconds, which is past every token handed out before, so that
    -- tokens keep growing across the loss (see keys.rs).
    local now = redis.call('TIME')
    fence = tonumber(now[1]) * 1000000 + tonumber(now[2])
    redis.call('SET', KEYS[2], string.format('%d', fence))
  end
  redis.call('HSET', KEYS[1], 'owner', ARGV[1], 'count', 1, 'fence', fence)
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1, fence, 1}
end
if owner == ARGV[1] then
  local count = redis.call('HINCRBY', KEYS[1], 'count', 1)
  -- A nested holder may ask for a longer lease; never shorten the outer one.
  if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[2]) then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
  end
  return {1, tonumber(redis.call('HGET', KEYS[1], 'fence')), count}
end
return {0, redis.call('PTTL', KEYS[1]), 0}
