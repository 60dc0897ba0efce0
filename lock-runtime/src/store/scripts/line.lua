-- Waiters' line: fair waiters, and waiters for a plain lock another holds
-- (acquire.lua); for the scripts that put waiters in it or give locks back
-- (see prelude.lua).

-- The line of waiters of the lock whose hash is `lock`, and their
-- liveness, as keys.rs names them. The scripts name a lock's companions
-- from its hash rather than take them as keys: each key a call sends costs
-- Redis (and the client) to read, and most calls use none of them. A
-- lock's keys share its hash slot (keys.rs), so on a Cluster they are on
-- the node the call goes to.
local function line_of(lock)
  local queue = lock .. ':queue'
  return queue, queue .. ':alive'
end

-- Puts `owner` in the lock's line of waiters: `queue` scored by
-- arrival, where a waiter already in line keeps its place (NX), and
-- `alive`, where its place counts for `stay` ms from now unless it tries
-- again. The caller makes both sets last (line_lasts), once for every
-- waiter it puts in line.
local function get_in_line(queue, alive, owner, stay)
  redis.call('ZADD', queue, 'NX', arrival(), owner)
  redis.call('ZADD', alive, now_ms() + stay, owner)
end

-- Makes the line's two sets live at least `stay` more ms (see keep_for):
-- an abandoned line lapses on its own.
local function line_lasts(queue, alive, stay)
  keep_for(queue, stay)
  keep_for(alive, stay)
end

-- The first waiter in the line (`queue`, `alive`) whose place still counts
-- (its time in `alive` has not run out), and how long it still does (ms);
-- nil when there is none. Waiters before it that stopped trying (died, gave
-- up silently) leave the line on the way, so that none that is gone stalls
-- it. `own`, an owner id or nil, is returned as it is when it comes first,
-- counting or not (and no time left): a caller's own place is its own.
local function first_live(queue, alive, own)
  local now = now_ms()
  while true do
    local first = redis.call('ZRANGE', queue, 0, 0)[1]
    if not first or first == own then
      return first, nil
    end
    local left = tonumber(redis.call('ZSCORE', alive, first) or '0') - now
    if left > 0 then
      return first, left
    end
    redis.call('ZREM', queue, first)
    redis.call('ZREM', alive, first)
  end
end

-- What a release announces: the first owner id in the lock's line of
-- waiters that still counts as waiting (see first_live), so that exactly
-- that waiter wakes, or "released" for anyone.
local function next_in_line(queue, alive)
  return first_live(queue, alive) or 'released'
end

-- How many times in a row a plain lock (see acquire.lua) may be taken past
-- its first waiter in line: until then, whoever asks while the lock is
-- free takes it (often its last holder asking again at once, which costs
-- one call, where the waiter a release wakes needs the message and a call
-- of its own); after that, only that waiter or another waiter of its
-- client may, so that a waiter is not passed over for ever.
local PASSES = 4

-- The client part of an owner id (`NAME@HOST:PID/CLIENT:SCOPE` without
-- `:SCOPE`), or nil for one of another form.
local function client_of(owner)
  return string.match(owner, '^(.+/.+):[^:]*$')
end

-- Tells the waiters of a lock that it is free, on its release channel
-- `channel`: `who` is next_in_line's answer. A message naming a waiter
-- goes to the channel of that waiter's client (`channel:CLIENT`, which
-- only that client subscribes, see wakeups.rs), so that a release costs
-- Redis one message to one client, not one to every client with waiters
-- for the lock, each of which would only find that it names another's.
-- Unless `everyone`: a waiter not in line (for several locks, a reader)
-- may wait for this release too (it marked the lock's hash, see
-- acquire.lua), and every client is told, as for a message naming nobody.
local function wake(channel, who, everyone)
  local client = not everyone and who ~= 'released' and client_of(who)
  redis.call(PUBLISH, client and channel .. ':' .. client or channel, who)
end

-- Marks the hash `key` of a lock held by another: a waiter in line waits
-- for its release ("w" = "l"), unless a waiter not in line marked it
-- already ("w" = 1, which wakes every client: see wake).
local function mark_in_line(key)
  if not redis.call('HGET', key, 'w') then
    redis.call('HSET', key, 'w', 'l')
  end
end

-- Names the next waiter in the line (`queue`, `alive`) of a lock nobody
-- holds, whose release channel is `channel`, if anyone is in line: for a
-- waiter that left the line, which may have been the one a release named
-- (see turn_leave.lua). Nothing else changed for a waiter not in line.
local function name_next(channel, queue, alive)
  if redis.call('ZCARD', queue) > 0 then
    wake(channel, next_in_line(queue, alive))
  end
end

-- Whether `owner` may take a free plain lock past its line (`queue`,
-- `alive`, and `passed`, which counts the passes and lasts as long as the
-- line): nil when the line is empty, or its first waiter still counting is
-- `owner` or of `owner`'s client; otherwise that first waiter, how often it
-- was passed over, and how long its place lasts (ms). Waiters before it
-- that stopped counting leave the line (as in next_in_line), so that one
-- that died does not lift the bound for those behind it.
local function first_waiter(queue, alive, passed, owner)
  local first, left = first_live(queue, alive, owner)
  local mine = client_of(owner)
  if not first or first == owner or (mine and mine == client_of(first)) then
    return nil
  end
  local seen = redis.call('HMGET', passed, 'first', 'n')
  return first, seen[1] == first and tonumber(seen[2]) or 0, left
end

-- Retires `owner` from the lock or leased set `key` for `ms` (see gone_key
-- in prelude.lua), and takes it out of the lock's line of waiters
-- (`queue`, `alive`; nil for a set without one): a fair attempt whose
-- answer was lost may have put it in line, where it would hold up everyone
-- behind it until its place lapsed. Returns true when it left the line.
local function retire(key, queue, alive, owner, ms)
  redis.call('SET', gone_key(key, owner), 1, 'PX', ms)
  if queue and redis.call('ZREM', queue, owner) == 1 then
    redis.call('ZREM', alive, owner)
    return true
  end
  return false
end
