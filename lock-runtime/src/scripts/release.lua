-- Give back one level of a lock, atomically, and wake waiters when it is free.
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the lock's release channel
-- ARGV[1]  owner id
-- ARGV[2]  "1" to drop every level at once (abandoning a lock whose acquire
--          reply was lost), "0" to count down by one
--
-- Returns the remaining re-entry count (0: released and published),
-- or -1 when the caller does not hold the lock (expired, or someone else's).
if redis.call('HGET', KEYS[1], 'owner') ~= ARGV[1] then
  return -1
end
local count = 0
if ARGV[2] ~= '1' then
  count = redis.call('HINCRBY', KEYS[1], 'count', -1)
end
if count > 0 then
  return count
end
redis.call('DEL', KEYS[1])
redis.call('PUBLISH', KEYS[2], 'released')
return 0
