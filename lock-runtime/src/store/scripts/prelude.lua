-- Shared by every script (prepended to each when it is loaded, after a line
-- that sets PUBLISH: 'SPUBLISH' on a Cluster, where release messages use
-- sharded pub/sub, 'PUBLISH' elsewhere). The helpers only some scripts
-- need are in fence.lua, places.lua and line.lua, prepended to those
-- scripts only (see mod.rs): run by EVALSHA, each helper is a closure made
-- anew at every script call, which Redis pays on its one thread. In the
-- library (library.lua), every helper is made once, when it is loaded.

-- The server's clock in microseconds, read once per script call (a call
-- may take many locks, see batch.lua): a script runs at once, as one step,
-- and Redis's own clock for key expiry stands still while it runs too.
-- Tokens drawn from it in one call still rise (see next_fence).
local clock_us = nil
local function now_us()
  if not clock_us then
    local t = redis.call('TIME')
    clock_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
  end
  return clock_us
end

-- A waiter's time of arrival in a line of fair waiters (us): the clock
-- (see now_us), kept apart, in the order they come, for the waiters that
-- arrive in one script call (a batch), whom it would otherwise tie (ties
-- in a sorted set go by name, not by arrival). A waiter already in line
-- keeps its first arrival (fair_acquire.lua adds it with NX): one drawn
-- for it anyway only puts later ones a microsecond further back.
local arrived = 0
local function arrival()
  arrived = math.max(now_us(), arrived + 1)
  return arrived
end

-- The server's clock in milliseconds (see now_us).
local function now_ms()
  return math.floor(now_us() / 1000)
end

-- Makes `key` live at least `ttl` more milliseconds, never less than it has.
local function keep_for(key, ttl)
  if redis.call('PTTL', key) < ttl then
    redis.call('PEXPIRE', key, ttl)
  end
end


-- The mark that retires `owner` from the lock or leased set `key`: an
-- acquisition whose answer was lost is given back under an owner id its
-- caller never uses again, and the give-back leaves this mark (release.lua,
-- place_release.lua). The acquire call may still run after it (sent on a
-- connection since replaced, held in a proxy, queued behind a stall): every
-- script that grants afresh refuses an owner id with the mark, so that such
-- a late grant cannot leave the lock taken by nobody for a lease.
local function gone_key(key, owner)
  return key .. ':gone:' .. owner
end
