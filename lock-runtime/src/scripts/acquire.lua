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
