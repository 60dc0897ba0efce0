-- Give back one level of one or more locks, atomically, and wake waiters
-- of each lock that becomes free: the first in line (the message names it:
-- for a fair lock, the one whose turn it is; for a plain lock, one waiter
-- instead of one in every client, see acquire.lua), otherwise any. A
-- release is announced only when someone waits: a fair lock, a lock whose
-- hash a waiter marked ("w", see acquire.lua), or when the caller says its
-- own client has waiters (which are not all in line: then any). A message
-- that names a waiter goes to its client alone, unless a waiter not in
-- line marked the hash (see wake in line.lua).
--
-- KEYS[1..n]       the lock hashes; each one's release channel, line of
--                  waiters and their liveness (line.lua) are named here
--                  from it, as acquire.lua names them, rather than sent:
--                  most releases use none of them, and each key a call
--                  sends costs Redis (and the client) to read
-- ARGV[1]          owner id
-- ARGV[2]          "1" to drop every level at once (abandoning locks whose
--                  acquire answer was lost), "0" to count down by one
-- ARGV[3]          ms a lock that becomes free stays taken (its holder asked
--                  to hold it at least that long after taking it); 0: freed
--                  at once
-- ARGV[4]          "1" when the caller's client has waiters for these
--                  locks (which wait behind one of them that tried, and
--                  did not all mark them): announce each release
-- ARGV[5]          ms to retire the owner id from each lock (see gone_key
--                  in prelude.lua), held or not: the acquire whose answer
--                  was lost may not have run yet; it also leaves the line
--                  of waiters; 0 (or absent): not retired
-- ARGV[6..5+n]     (a give-back of a grant, see calls.rs, `undo`; absent
--                  otherwise) the token each lock was granted with. A lock
--                  the owner id holds under another token was granted to it
--                  again since: the grant given back lapsed, and this
--                  give-back arrives late (sent on a connection that went
--                  dead, say). It is not the give-back's to free: left as
--                  it is, and answered -1
--
-- Returns, per lock, the remaining re-entry count (0: released and
-- published), or -1 when the caller does not hold it (expired, someone
-- else's, or granted again since the grant a give-back names) or gave
-- back its every level already (kept until its minimum, see below).
local n = #KEYS
local ms = tonumber(ARGV[5] or '0')
-- Lock i's release channel, line of waiters and their liveness.
local function channel(i)
  return KEYS[i] .. ':released'
end
local function line(i)
  return line_of(KEYS[i])
end
-- Tells the waiters of lock i (its hash's fields `held`) that its holder
-- let go: the first in line, or any when nobody is (or the caller's own
-- waiters may not be).
local function announce(i, held)
  if held[3] or (held[4] and ARGV[4] ~= '1') then
    wake(channel(i), next_in_line(line(i)), held[4] == '1')
  elseif held[4] or ARGV[4] == '1' then
    redis.call(PUBLISH, channel(i), 'released')
  end
end
local result = {}
for i = 1, n do
  local queue, alive = nil, nil
  if ms > 0 then
    queue, alive = line(i)
  end
  local left_line = ms > 0 and retire(KEYS[i], queue, alive, ARGV[1], ms)
  local held = redis.call('HMGET', KEYS[i], 'owner', 'count', 'fair', 'w')
  local granted = ARGV[5 + i]
  if held[1] == ARGV[1] and granted
      and tonumber(redis.call('HGET', KEYS[i], 'fence')) ~= tonumber(granted) then
    result[i] = -1
  elseif held[1] ~= ARGV[1] then
    result[i] = -1
    -- As fair_leave.lua: a free lock goes to the next in line.
    if left_line and not held[1] then
      name_next(channel(i), queue, alive)
    end
  elseif held[2] == '0' and ARGV[2] ~= '1' then
    -- Kept after its last release (ARGV[3] below), which gave back every
    -- level: a release of one level that comes after it (a nested guard's,
    -- held up) has nothing left to give back, and must not free the lock
    -- before its time.
    result[i] = -1
  else
    local count = 0
    if ARGV[2] ~= '1' then
      count = tonumber(held[2]) - 1
    end
    local keep = tonumber(ARGV[3] or '0')
    if count > 0 then
      redis.call('HSET', KEYS[i], 'count', count)
    elseif keep > 0 then
      -- Still taken by its owner, whose scope is over, until it expires.
      -- Waiters that looked before slept until the holder's lease would
      -- run out: told now, they look again and sleep only until then.
      count = 0
      redis.call('HSET', KEYS[i], 'count', 0)
      redis.call('PEXPIRE', KEYS[i], keep)
      announce(i, held)
    else
      count = 0
      redis.call('DEL', KEYS[i])
      announce(i, held)
    end
    result[i] = count
  end
end
return result
