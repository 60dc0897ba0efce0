-- Take or re-enter the read side of a read-write lock, atomically.
--
-- KEYS[1]  the lock hash (its owner, if any, is the writer)
-- KEYS[2]  the readers: a sorted set scored by lease expiry (ms)
-- KEYS[3]  the readers' re-entry counts and tokens
-- KEYS[4]  the fencing counter of the lock's hash slot
-- KEYS[5]  the marker a waiting writer sets to hold back new readers
-- ARGV[1]  owner id
-- ARGV[2]  lease in milliseconds
-- ARGV[3..5]  the restart quarantine: run id seen, ms, strict (prelude)
--
-- Returns {1, fence, count} when the caller reads afterwards, or {0, pttl}
-- with how long the writer (or the waiting writer's marker) lasts at most.
local writer = redis.call('HGET', KEYS[1], 'owner')
if writer and writer ~= ARGV[1] then
  return {0, redis.call('PTTL', KEYS[1])}
end
-- A writer is waiting: new readers queue behind it so that a stream of
-- readers cannot starve it. Readers already in (re-entering) and the
-- writer itself (downgrading) go on, or they would wait for themselves.
if not writer and not holds_place(KEYS[2], ARGV[1]) and redis.call('EXISTS', KEYS[5]) == 1 then
  return {0, redis.call('PTTL', KEYS[5])}
end
return take_place(KEYS[2], KEYS[3], KEYS[4], ARGV[1], tonumber(ARGV[2]), nil, quarantine_at(3))
