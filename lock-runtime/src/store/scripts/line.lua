-- Fair waiters' line: for the scripts that put waiters in it or give
-- locks back (see prelude.lua).

-- Puts `owner` in the lock's line of fair waiters: `queue` scored by
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

-- What a release announces: the first owner id in the lock's queue of fair
-- waiters that still counts as waiting (its time in `alive` has not run
-- out), so that exactly that waiter wakes, or "released" for anyone.
-- Waiters that stopped trying (died, gave up silently) are dropped on the
-- way, so that a release never names one that is gone and stalls the line.
local function next_in_line(queue, alive)
  local now = now_ms()
  while true do
    local first = redis.call('ZRANGE', queue, 0, 0)[1]
    if not first then
      return 'released'
    end
    local until_ms = redis.call('ZSCORE', alive, first)
    if until_ms and tonumber(until_ms) > now then
      return first
    end
    redis.call('ZREM', queue, first)
    redis.call('ZREM', alive, first)
  end
end

-- Retires `owner` from the lock or leased set `key` for `ms` (see gone_key
-- in prelude.lua), and takes it out of the lock's line of fair waiters
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
