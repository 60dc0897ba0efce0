-- Give back one level of one or more locks, atomically, and wake waiters
-- of each lock that becomes free: the first in line if the lock has a queue
-- of fair waiters (the message names it), otherwise any.
--
-- KEYS[1..n]       the lock hashes, n = #KEYS / 3
-- KEYS[n+1..2n]    their release channels
-- KEYS[2n+1..3n]   their queues of fair waiters
-- ARGV[1]          owner id
-- ARGV[2]          "1" to drop every level at once (abandoning locks whose
--                  acquire answer was lost), "0" to count down by one
--
-- Returns, per lock, the remaining re-entry count (0: released and
-- published), or -1 when the caller does not hold it (expired, or someone
-- else's).
local n = #KEYS / 3
local result = {}
for i = 1, n do
  if redis.call('HGET', KEYS[i], 'owner') ~= ARGV[1] then
    result[i] = -1
  else
    local count = 0
    if ARGV[2] ~= '1' then
      count = redis.call('HINCRBY', KEYS[i], 'count', -1)
    end
    if count <= 0 then
      count = 0
      redis.call('DEL', KEYS[i])
      redis.call('PUBLISH', KEYS[n + i], next_in_line(KEYS[2 * n + i]))
    end
    result[i] = count
  end
end
return result
