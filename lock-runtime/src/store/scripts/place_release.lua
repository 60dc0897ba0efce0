-- Give back one level of a place in a leased set (a semaphore's permits, a
-- read lock), and wake waiters when the place is free.
--
-- KEYS[1]  the places (sorted set scored by lease expiry)
-- KEYS[2]  the holders' counts and tokens (for a semaphore, also each
--          holder's permits and the permits taken in all: permit_acquire.lua)
-- KEYS[3]  the release channel
-- KEYS[4]  (read locks) the lock's queue of fair waiters, to name the next
-- KEYS[5]  (read locks) the fair waiters' liveness
-- ARGV[1]  owner id
-- ARGV[2]  "1" to drop every level at once, "0" to count down by one
-- ARGV[3]  ms to retire the owner id from the set, held or not (see
--          release.lua); 0 (or absent): not retired
-- ARGV[4]  (a give-back of a grant, see calls.rs, `undo`; absent
--          otherwise) the token the place was granted with: a place the
--          owner id holds under another token was granted to it again
--          since, and is not the give-back's to free (see release.lua)
--
-- Returns {count}: the remaining re-entry count (0: the place is free), or
-- -1 when the caller does not hold a place (its lease ran out), or holds one
-- granted since the grant a give-back names.
local ms = tonumber(ARGV[3] or '0')
local left_line = ms > 0 and retire(KEYS[1], KEYS[4], KEYS[5], ARGV[1], ms)
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not score or tonumber(score) <= now_ms() then
  if left_line and redis.call('ZCARD', KEYS[4]) > 0 then
    redis.call(PUBLISH, KEYS[3], next_in_line(KEYS[4], KEYS[5]))
  end
  return {-1}
end
if ARGV[4] and tonumber(redis.call('HGET', KEYS[2], 'f:' .. ARGV[1])) ~= tonumber(ARGV[4]) then
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
-- A semaphore's holder gives back every permit it holds (one for a holder
-- of an older version, without a "p:" field, and for a reader); the
-- semaphore's total goes down by as many (readers have no total).
local permits = tonumber(redis.call('HGET', KEYS[2], 'p:' .. ARGV[1]) or '1')
redis.call('HDEL', KEYS[2], 'c:' .. ARGV[1], 'f:' .. ARGV[1], 'p:' .. ARGV[1])
if redis.call('ZCARD', KEYS[1]) == 0 then
  redis.call('DEL', KEYS[1], KEYS[2])
elseif redis.call('HEXISTS', KEYS[2], 'taken') == 1 then
  redis.call('HINCRBY', KEYS[2], 'taken', -permits)
end
if KEYS[4] then
  redis.call(PUBLISH, KEYS[3], next_in_line(KEYS[4], KEYS[5]))
else
  -- One message per permit freed (up to 100), so that as many waiters wake
  -- in each client as may now get in: a client wakes one waiter for each.
  for _ = 1, math.min(permits, 100) do
    redis.call(PUBLISH, KEYS[3], 'released')
  end
end
return {0}
