-- A writer or reader that stops waiting without the lock takes back the
-- marks it set (acquire.lua, read_acquire.lua), so that the other side is
-- not held back for a turn nobody will take; waiters held back by a mark
-- are woken to look again. A mark set by another waiter stays.
--
-- KEYS[1..n]       each lock's waiting-writer marker, n = #KEYS / 3
-- KEYS[n+1..2n]    each lock's waiting-readers marker
-- KEYS[2n+1..3n]   each lock's release channel
-- ARGV[1]          owner id
--
-- Returns the number of marks taken back.
local n = #KEYS / 3
local taken = 0
for i = 1, n do
  local here = 0
  for _, marker in ipairs({KEYS[i], KEYS[n + i]}) do
    if redis.call('GET', marker) == ARGV[1] then
      redis.call('DEL', marker)
      here = here + 1
    end
  end
  if here > 0 then
    redis.call(PUBLISH, KEYS[2 * n + i], 'released')
    taken = taken + here
  end
end
return taken
