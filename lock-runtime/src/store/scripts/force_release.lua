-- Take a lock away from whoever holds it, for an operator: delete what its
-- holders hold (the lock hash, or a semaphore's permits, and a read-write
-- lock's readers) and announce the release as release.lua does, so that
-- waiters try again at once. The holders learn of the loss at their next
-- renewal, which finds the lock gone. What belongs to waiters stays (the
-- line, the turn-taking markers), so waiters in line keep their order.
-- Keys of a type no lock script writes are not touched.
--
-- KEYS[1]  the lock: a hash, or a semaphore's sorted set of permits
-- KEYS[2]  the semaphore holders' re-entry counts and tokens
-- KEYS[3]  the readers of a read-write lock
-- KEYS[4]  the readers' re-entry counts and tokens
-- KEYS[5]  the line of waiters
-- KEYS[6]  the waiters' liveness
-- KEYS[7]  the release channel
--
-- Returns 1 when something held was deleted (and the release announced),
-- 0 when nothing was held. A sorted set of places holds the lock only
-- while one of its places has not expired (as inspect.lua reads it): a
-- set left with the place of a holder that died, kept by the renewals of
-- others since gone, is deleted, but held nothing.
local function type_of(key)
  return redis.call('TYPE', key)['ok']
end

local function live_places(key)
  return redis.call('ZCOUNT', key, '(' .. now_ms(), '+inf')
end

local held = 0
local lock_type = type_of(KEYS[1])
if lock_type == 'hash' then
  held = held + redis.call('DEL', KEYS[1])
elseif lock_type == 'zset' then
  held = held + live_places(KEYS[1])
  redis.call('DEL', KEYS[1], KEYS[2])
end
if type_of(KEYS[3]) == 'zset' then
  held = held + live_places(KEYS[3])
  redis.call('DEL', KEYS[3], KEYS[4])
end
if held == 0 then
  return 0
end

-- A fair lock's release names the first waiter in line still waiting.
local message = 'released'
if type_of(KEYS[5]) == 'zset' then
  message = next_in_line(KEYS[5], KEYS[6])
end
redis.call(PUBLISH, KEYS[7], message)
return 1
