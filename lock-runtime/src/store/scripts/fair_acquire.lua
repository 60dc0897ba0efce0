-- Take or re-enter a lock in arrival order, or wait in line, atomically.
--
-- KEYS[1]  the lock hash (owner, count, fence)
-- KEYS[2]  the fencing counter of the lock's hash slot
-- Named here from the hash (see line_of in line.lua): the queue, waiting
-- owners scored by arrival (server clock, us); the waiters' liveness,
-- owners scored by when they stop counting (ms); and the lock's readers
-- (read-write locks), which also keep it taken.
-- ARGV[1]  owner id
-- ARGV[2]  lease in milliseconds
-- ARGV[3]  how long a waiter stays in line without trying again (ms)
-- ARGV[4]  "1" to wait in line when the lock is not ours to take, "0" not to
-- ARGV[5]  how the caller asks for it (see acquire.lua): "0" afresh, "h" or
--          "k" re-entering it, "o" upgrading from its read side; a lock it
--          no longer holds so is not taken afresh
-- ARGV[6..8]  the restart quarantine: run id seen, ms, strict (fence.lua)
--
-- Returns {1, fence, count} when the caller holds the lock afterwards,
-- {-4, 1} when it re-enters and no longer holds it, or
-- {0, ms, quarantined} with how long until the holder's lease or the first
-- waiter's place runs out, or, quarantined 1, how long the restart
-- quarantine keeps the lock closed.
local now = now_ms()
local queue, alive = line_of(KEYS[1])
local readers_key = KEYS[1] .. ':readers'
local held = redis.call('HMGET', KEYS[1], 'owner', 'fair')
local owner = held[1]
local how = ARGV[5]
if owner == ARGV[1] then
  local count = redis.call('HINCRBY', KEYS[1], 'count', 1)
  if how ~= 'k' then
    keep_for(KEYS[1], tonumber(ARGV[2]))
  end
  return {1, tonumber(redis.call('HGET', KEYS[1], 'fence')), count}
end
if how == '0' then
  -- A give-back retired this owner id (its caller gave up): a late call,
  -- refused before it takes the lock or a place in line (see gone_key in
  -- prelude.lua).
  local gone = gone_key(KEYS[1], ARGV[1])
  if redis.call('EXISTS', gone) == 1 then
    return {0, redis.call('PTTL', gone), 0}
  end
end
-- An upgrade: the caller's own read place, live, is not a reader in its way.
local upgrading = false
if how ~= '0' then
  local reading = redis.call('ZSCORE', readers_key, ARGV[1])
  if how ~= 'o' or not reading or tonumber(reading) <= now then
    return {-4, 1}
  end
  upgrading = true
end

-- Who is first in line and how many readers hold the read side matter
-- only to a lock nobody holds: a held one is not asked. Waiters that
-- stopped trying (died, gave up silently) leave the line first. (A held
-- lock's release skips them too, see next_in_line in line.lua. Each call a
-- script makes costs Redis on its one thread: most calls find none, and
-- remove nothing.)
local first, readers = nil, 0
if not owner then
  local stopped = redis.call('ZRANGEBYSCORE', alive, '-inf', now)
  if #stopped > 0 then
    for _, gone in ipairs(stopped) do
      redis.call('ZREM', queue, gone)
    end
    redis.call('ZREMRANGEBYSCORE', alive, '-inf', now)
  end
  first = redis.call('ZRANGE', queue, 0, 0)[1]
  readers = redis.call('ZCOUNT', readers_key, '(' .. now, '+inf')
  if upgrading then
    readers = readers - 1
  end
end
local closed = nil
if not owner and readers == 0 and (not first or first == ARGV[1]) then
  local fence
  fence, closed = next_fence(KEYS[2], quarantine_at(ARGV, 6))
  if fence then
    -- `fair` tells the release to name the next in line.
    redis.call('HSET', KEYS[1], 'owner', ARGV[1], 'count', 1, 'fence', fence, 'fair', 1)
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    redis.call('ZREM', queue, ARGV[1])
    redis.call('ZREM', alive, ARGV[1])
    return {1, fence, 1}
  end
end

local ttl
if closed then
  ttl = closed
elseif owner then
  ttl = redis.call('PTTL', KEYS[1])
  if ARGV[4] == '1' and not held[2] then
    -- Held by a plain (not fair) holder, whose release announces itself
    -- only when marked (release.lua); a fair holder's always does. The
    -- mark of a waiter in line (see acquire.lua).
    mark_in_line(KEYS[1])
  end
elseif readers > 0 then
  local last = redis.call('ZRANGE', readers_key, -1, -1, 'WITHSCORES')
  ttl = tonumber(last[2]) - now
else
  ttl = tonumber(redis.call('ZSCORE', alive, first) or now) - now
end
if ARGV[4] == '1' then
  local stay = tonumber(ARGV[3])
  get_in_line(queue, alive, ARGV[1], stay)
  line_lasts(queue, alive, stay)
end
return {0, ttl, closed and 1 or 0}
