-- A writer or reader that stops waiting without the lock takes back the
-- marks it set (acquire.lua, read_acquire.lua), so that the other side is
-- not held back for a turn nobody will take; waiters held back by a mark
-- are woken to look again. A mark set by another waiter stays. It also
-- leaves the line it got in (acquire.lua): when the lock is free, the next
-- in line is told to take it, since a release may have named this waiter.
--
-- KEYS[1..n]       each lock's waiting-writer marker, n = #KEYS / 6
-- KEYS[n+1..2n]    each lock's waiting-readers marker
-- KEYS[2n+1..3n]   each lock's release channel
-- KEYS[3n+1..4n]   each lock's line of waiters
-- KEYS[4n+1..5n]   their liveness
-- KEYS[5n+1..6n]   each lock's hash
-- ARGV[1]          owner id
--
-- Returns the number of marks taken back.
local n = #KEYS / 6
local taken = 0
for i = 1, n do
  local here = 0
  for _, marker in ipairs({KEYS[i], KEYS[n + i]}) do
    if redis.call('GET', marker) == ARGV[1] then
      redis.call('DEL', marker)
      here = here + 1
    end
  end
  local left_line = redis.call('ZREM', KEYS[3 * n + i], ARGV[1]) == 1
  if left_line then
    redis.call('ZREM', KEYS[4 * n + i], ARGV[1])
  end
  if here > 0 then
    redis.call(PUBLISH, KEYS[2 * n + i], 'released')
    taken = taken + here
  elseif left_line and redis.call('EXISTS', KEYS[5 * n + i]) == 0 then
    name_next(KEYS[2 * n + i], KEYS[3 * n + i], KEYS[4 * n + i])
  end
end
return taken
