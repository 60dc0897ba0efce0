-- Take, re-enter, or report who holds one or more locks, atomically: all of
-- them or none, so that callers naming the same locks in any order never
-- deadlock. A lock is also held while it has readers (read-write locks);
-- a caller that waits for readers marks itself waiting, which holds back
-- new readers until it is in.
--
-- KEYS[1..n]       the lock hashes (owner, count, fence), n = #KEYS / 2
-- KEYS[n+1..2n]    the fencing counter of each lock's hash slot (see keys.rs)
--
-- Each lock's read side is named here from its hash, as keys.rs names it,
-- rather than sent (each key a call sends costs Redis, and the client, to
-- read, and most locks never have readers): its readers
-- `KEYS[i]:readers` (a sorted set scored by lease expiry), its
-- waiting-writer marker `KEYS[i]:writer-waiting` and its waiting-readers
-- marker `KEYS[i]:readers-waiting` (a writer that finds it, and no writer
-- waiting for readers, lets the readers go first, so that a writer in a
-- loop cannot starve them).
--
-- A call for one lock with ARGV[5] "1" also uses the lock's line of waiters
-- `KEYS[1]:queue`, their liveness `KEYS[1]:queue:alive` and how often its
-- first waiter was passed over, `KEYS[1]:queue:passed` (line.lua; named
-- here rather than sent, as the gone keys are: a lock's keys share its
-- slot, see keys.rs): a caller that waits for the lock held by another
-- gets in line, so that a release names one waiter to wake instead of
-- waking one in every client. The line decides who is woken, not who takes
-- the lock: whoever asks first while it is free does, unless its first
-- waiter was passed over too often (see PASSES in line.lua).
--
-- ARGV[1]          owner id (client uuid : scope id)
-- ARGV[2]          lease in milliseconds
-- ARGV[3]          how long a waiting writer's mark lasts unless it tries
--                  again (ms; 0: the caller does not wait). A caller that
--                  waits and finds a lock taken marks its hash ("w": "l"
--                  for a waiter in line, 1 for one not), so that its
--                  release is announced. The caller
--                  takes it back when it stops waiting; a dead caller's
--                  mark lapses after this long, and so does its place in
--                  line.
-- ARGV[4]          how the caller asks for each lock, one character per
--                  lock (see calls.rs, `Asking`): "0" takes it afresh; the
--                  others re-enter what an enclosing critical section of
--                  the same owner id holds: "h" the lock itself, "k" the
--                  same keeping its lease (a fixed lease bounds the whole
--                  hold), "o" the write side while holding the read side
--                  (an upgrade). A lock the caller no longer holds that way
--                  was lost (deleted by an operator, evicted, dropped by a
--                  failover): it is not taken afresh, which would grant it
--                  anew behind the enclosing holder's back.
-- ARGV[5]          "1" when the lock's line applies (one lock asked for
--                  alone, afresh, on one server or Cluster: not on Redlock,
--                  where each master would keep a line of its own), "0"
--                  when not
-- ARGV[6..8]       the restart quarantine: run id seen, ms, strict (fence.lua)
--
-- An owner id a give-back retired (see gone_key in prelude.lua) is never
-- granted a lock afresh: the call is answered as busy.
--
-- Returns {1, fence_1, count_1, ..., fence_n, count_n} when the caller holds
-- every lock afterwards, {-4, i} when it re-enters and no longer holds lock
-- i, or {0, pttl, quarantined} with the longest remaining lease among
-- the holders in the way (-1 when one of them has no expiry), and
-- quarantined 1 when only the restart quarantine is in the way (pttl is
-- then how long it lasts); a caller that
-- marked itself waiting or got in line is told to try again within half
-- its mark's life, so that the mark and the place last as long as it waits.
local n = #KEYS / 2
local q = quarantine_at(ARGV, 6)
-- Whether the lock's line applies (see ARGV[5]), and its keys (the line's
-- other two only past the common call below, which needs none of them).
local lined = n == 1 and ARGV[5] == '1' and ARGV[4] == '0'
local queue, alive, passed = nil, nil, nil
if lined then
  queue = KEYS[1] .. ':queue'
end
-- The common call, straight: one lock taken afresh that has none of its
-- keys (free, never had readers, no writer or readers waiting, nobody in
-- line where the line applies, its owner id not retired). It makes the
-- calls the loop below would make for it, without
-- the loop's helpers and tables, which Redis pays on its one thread at
-- every call. Any other call goes on below, told what EXISTS said.
local first_untouched = nil
if n == 1 and ARGV[4] == '0' then
  local lock = KEYS[1]
  first_untouched = redis.call('EXISTS', lock, lock .. ':readers', lock .. ':writer-waiting',
    lock .. ':readers-waiting', queue or lock, gone_key(lock, ARGV[1])) == 0
  if first_untouched then
    local fence, closed = next_fence(KEYS[2], q)
    if not fence then
      return {0, closed, 1}
    end
    redis.call('HSET', KEYS[1], 'owner', ARGV[1], 'count', 1, 'fence', fence)
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    return {1, fence, 1}
  end
end
if lined then
  alive, passed = queue .. ':alive', queue .. ':passed'
end
-- Lock i's readers and the markers of its waiting writer and readers
-- (see the keys above).
local function turn_keys(i)
  local lock = KEYS[i]
  return lock .. ':readers', lock .. ':writer-waiting', lock .. ':readers-waiting'
end
local function asking(i)
  local how = string.sub(ARGV[4], i, i)
  return how ~= '' and how or '0'
end
local longest = nil
-- How many things are in the way, and how many of them are the quarantine.
local blocks, closed_slots = 0, 0
local function blocked_for(ttl)
  blocks = blocks + 1
  if ttl < 0 or longest == -1 then
    longest = -1
  elseif not longest or ttl > longest then
    longest = ttl
  end
end
-- A give-back retired this owner id (its caller gave up, see gone_key in
-- prelude.lua): a late call, refused before it takes the lock or leaves a
-- mark that would hold others back. Only a fresh call can be retired, and
-- only a lock with some of its keys (its gone key among them) is asked.
local function refused(gone, how)
  if how == '0' and redis.call('EXISTS', gone) == 1 then
    return {0, redis.call('PTTL', gone), 0}
  end
end
-- First look at every lock and draw the tokens of the free ones, taking
-- nothing yet: all or none.
local owners, fences, marked = {}, {}, {}
-- Whether the caller got in line (only where the line applies, see
-- `lined`), and the first waiter it takes the lock past, if it does.
local in_line, passing = false, nil
for i = 1, n do
  local readers, marker, readers_waiting = turn_keys(i)
  -- Most locks asked for are free and never had readers: one call tells
  -- (each call a script makes costs Redis on its one thread), and only a
  -- lock that has some of its keys is read further.
  local gone = gone_key(KEYS[i], ARGV[1])
  local untouched = first_untouched
  if i > 1 or untouched == nil then
    untouched = redis.call('EXISTS', KEYS[i], readers, marker, readers_waiting, gone) == 0
  end
  local owner = nil
  if not untouched then
    owner = redis.call('HGET', KEYS[i], 'owner')
  end
  owners[i] = owner
  local how = asking(i)
  if how ~= '0' and owner ~= ARGV[1]
      and (how ~= 'o' or untouched or not holds_place(readers, ARGV[1])) then
    return {-4, i}
  end
  if owner and owner ~= ARGV[1] then
    blocked_for(redis.call('PTTL', KEYS[i]))
    if tonumber(ARGV[3]) > 0 then
      local no = refused(gone, how)
      if no then
        return no
      end
      -- The caller waits: its release must be announced (release.lua),
      -- and it names the first in line. The mark says who waits: "l" only
      -- waiters in line, each woken by a message to its own client; 1 also
      -- one not in line (for several locks, on Redlock), which any release
      -- must reach (see wake in line.lua).
      if lined then
        mark_in_line(KEYS[i])
      else
        redis.call('HSET', KEYS[i], 'w', 1)
      end
      in_line = lined
    end
  elseif not owner then
    local no = not untouched and refused(gone, how)
    if no then
      return no
    end
    if not untouched and redis.call('EXISTS', readers, marker, readers_waiting) > 0 then
      local now = now_ms()
      local others = redis.call('ZCOUNT', readers, '(' .. now, '+inf')
      if holds_place(readers, ARGV[1]) then
        others = others - 1
      end
      if others > 0 then
        local last = redis.call('ZRANGE', readers, -1, -1, 'WITHSCORES')
        blocked_for(tonumber(last[2]) - now)
        if tonumber(ARGV[3]) > 0 then
          redis.call('SET', marker, ARGV[1], 'PX', ARGV[3])
        end
      elseif redis.call('EXISTS', marker) == 0 and redis.call('EXISTS', readers_waiting) == 1 then
        blocked_for(redis.call('PTTL', readers_waiting))
      end
      marked[i] = redis.call('GET', marker) == ARGV[1]
    end
    if not longest and lined and not untouched then
      local first, passes, left = first_waiter(queue, alive, passed, ARGV[1])
      if first and passes >= PASSES then
        blocked_for(left)
        in_line = tonumber(ARGV[3]) > 0
      elseif first then
        -- Taken past it, if nothing else is in the way.
        passing = {first, passes + 1, left}
      end
    end
    if not longest then
      local fence, closed = next_fence(KEYS[n + i], q)
      if fence then
        fences[i] = fence
      else
        blocked_for(closed)
        closed_slots = closed_slots + 1
      end
    end
  end
end
if longest then
  local mark = tonumber(ARGV[3])
  if in_line then
    get_in_line(queue, alive, ARGV[1], mark)
    line_lasts(queue, alive, mark)
    -- The count of passes lasts as long as the line (see first_waiter).
    keep_for(passed, mark)
  end
  for i = 1, n do
    if (marked[i] or in_line) and (longest < 0 or longest > mark / 2) then
      longest = math.floor(mark / 2)
    end
  end
  return {0, longest, closed_slots == blocks and 1 or 0}
end

local result = {1}
for i = 1, n do
  local fence, count
  if owners[i] then
    count = redis.call('HINCRBY', KEYS[i], 'count', 1)
    fence = tonumber(redis.call('HGET', KEYS[i], 'fence'))
    -- A nested holder may ask for a longer lease; never shorten the outer
    -- one, nor lengthen a fixed one.
    if asking(i) ~= 'k' then
      keep_for(KEYS[i], tonumber(ARGV[2]))
    end
  else
    fence = fences[i]
    count = 1
    if marked[i] then
      -- Readers this writer's mark held back wait for its release: it
      -- must be announced, as for a waiter that found the lock taken.
      redis.call('HSET', KEYS[i], 'owner', ARGV[1], 'count', 1, 'fence', fence, 'w', 1)
      redis.call('DEL', KEYS[i] .. ':writer-waiting')
    else
      redis.call('HSET', KEYS[i], 'owner', ARGV[1], 'count', 1, 'fence', fence)
    end
    redis.call('PEXPIRE', KEYS[i], ARGV[2])
    if lined and not first_untouched then
      -- Its place in line, if it waited, is over; a line still there
      -- must hear of its release (release.lua).
      redis.call('ZREM', queue, ARGV[1])
      redis.call('ZREM', alive, ARGV[1])
      if not marked[i] and redis.call('EXISTS', queue) == 1 then
        redis.call('HSET', KEYS[i], 'w', 'l')
      end
      if passing then
        redis.call('HSET', passed, 'first', passing[1], 'n', passing[2])
        keep_for(passed, passing[3])
      end
    end
  end
  result[2 * i] = fence
  result[2 * i + 1] = count
end
return result
