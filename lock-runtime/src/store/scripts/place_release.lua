-- Give back one level of a place in a leased set (a semaphore permit, a
-- read lock), and wake a waiter when the place is free.
--
-- KEYS[1]  the places (sorted set scored by lease expiry)
-- KEYS[2]  the holders' counts and tokens
-- KEYS[3]  the release channel
-- KEYS[4]  (read locks) the lock's queue of fair waiters, to name the next
-- KEYS[5]  (read locks) the fair waiters' liveness
-- ARGV[1]  owner id
-- ARGV[2]  "1" to drop every level at once, "0" to count down by one
--
-- Returns {count}: the remaining re-entry count (0: the place is free), or
-- -1 when the caller does not hold a place (its lease ran out).
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not score or tonumber(score) <= now_ms() then
  return {-1}
end
local count = 0
if ARGV[2] ~= '1' then
  count = redis.call('HINCRBY', KEYS[2], 'c:' .. ARGV[1], -1)
end
if count > 0 then
  return {count}
end
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], 'c:' .. ARGV[1], 'f:' .. ARGV[1])
if redis.call('ZCARD', KEYS[1]) == 0 then
  redis.call('DEL', KEYS[1], KEYS[2])
end
if KEYS[4] then
  redis.call(PUBLISH, KEYS[3], next_in_line(KEYS[4], KEYS[5]))
else
  redis.call(PUBLISH, KEYS[3], 'released')
end
return {0}
