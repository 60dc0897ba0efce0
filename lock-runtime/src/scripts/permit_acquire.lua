-- Take, re-enter, or wait for one of N permits of a semaphore, atomically.
--
-- KEYS[1]  the permits: a sorted set of holders scored by lease expiry (ms)
-- KEYS[2]  the holders' re-entry counts ("c:" owner) and tokens ("f:" owner)
-- KEYS[3]  the fencing counter of the semaphore's hash slot
-- ARGV[1]  owner id
-- ARGV[2]  lease in milliseconds
-- ARGV[3]  number of permits
--
-- Returns {1, fence, count} when the caller holds a permit afterwards, or
-- {0, ms} with the time until the first permit's lease runs out.
local now = now_ms()
local lease = tonumber(ARGV[2])
-- Permits whose holders stopped renewing them come back.
for _, gone in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now)) do
  redis.call('HDEL', KEYS[2], 'c:' .. gone, 'f:' .. gone)
end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)

if redis.call('ZSCORE', KEYS[1], ARGV[1]) then
  local count = redis.call('HINCRBY', KEYS[2], 'c:' .. ARGV[1], 1)
  local fence = tonumber(redis.call('HGET', KEYS[2], 'f:' .. ARGV[1]))
  redis.call('ZADD', KEYS[1], 'GT', now + lease, ARGV[1])
  keep_for(KEYS[1], lease)
  keep_for(KEYS[2], lease)
  return {1, fence, count}
end
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[3]) then
  local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  return {0, tonumber(first[2]) - now}
end
local fence = next_fence(KEYS[3])
redis.call('ZADD', KEYS[1], now + lease, ARGV[1])
redis.call('HSET', KEYS[2], 'c:' .. ARGV[1], 1, 'f:' .. ARGV[1], fence)
keep_for(KEYS[1], lease)
keep_for(KEYS[2], lease)
return {1, fence, 1}
