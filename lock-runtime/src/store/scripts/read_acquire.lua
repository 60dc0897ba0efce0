-- Take or re-enter the read side of a read-write lock, atomically.
--
-- KEYS[1]  the lock hash (its owner, if any, is the writer)
-- KEYS[2]  the readers: a sorted set scored by lease expiry (ms)
-- KEYS[3]  the readers' re-entry counts and tokens
-- KEYS[4]  the fencing counter of the lock's hash slot
-- KEYS[5]  the marker a waiting writer sets to hold back new readers
-- KEYS[6]  the marker waiting readers set so that the next free turn is theirs
-- ARGV[1]  owner id
-- ARGV[2]  lease in milliseconds
-- ARGV[3]  how long a waiting reader's mark lasts unless it tries again
--          (ms; 0: the caller does not wait); see acquire.lua
-- ARGV[4]  how the caller asks (see acquire.lua): "0" afresh, "h" or "k"
--          (keeping its lease) re-entering its read side, "o" the writer
--          taking the read side too (a downgrade)
-- ARGV[5..7]  the restart quarantine: run id seen, ms, strict (fence.lua)
--
-- Returns {1, fence, count} when the caller reads afterwards, {-4, 1} when
-- it re-enters and holds neither side any more, or {0, pttl}
-- with how long the writer (or the waiting writer's marker) lasts at most,
-- and at most half the caller's own mark's life.
--
-- Writers and readers take turns: a waiting writer holds back new readers
-- (so a stream of readers cannot starve it), and waiting readers keep a
-- writer that just let go from taking the lock straight back (so a writer in
-- a loop cannot starve them).
local function wait_for_turn(ttl)
  local mark = tonumber(ARGV[3])
  if mark > 0 then
    redis.call('SET', KEYS[6], ARGV[1], 'PX', mark)
    if ttl < 0 or ttl > mark / 2 then
      ttl = math.floor(mark / 2)
    end
  end
  return {0, ttl}
end
-- A give-back retired this owner id (its caller gave up, see gone_key in
-- prelude.lua): a late call, refused before it leaves a mark that would
-- hold writers back (take_place refuses it when nothing is in the way).
local function refused()
  if ARGV[4] == '0' and tonumber(ARGV[3]) > 0 then
    local gone = gone_key(KEYS[2], ARGV[1])
    if redis.call('EXISTS', gone) == 1 then
      return {0, redis.call('PTTL', gone)}
    end
  end
end
local writer = redis.call('HGET', KEYS[1], 'owner')
local how = ARGV[4]
if how ~= '0' and not (how == 'o' and writer == ARGV[1]) and not holds_place(KEYS[2], ARGV[1]) then
  return {-4, 1}
end
if writer and writer ~= ARGV[1] then
  local no = refused()
  if no then
    return no
  end
  if tonumber(ARGV[3]) > 0 then
    -- The caller waits: the writer's release must be announced (release.lua).
    redis.call('HSET', KEYS[1], 'w', 1)
  end
  return wait_for_turn(redis.call('PTTL', KEYS[1]))
end
-- Readers already in (re-entering) and the writer itself (downgrading) go
-- on past a waiting writer, or they would wait for themselves.
if not writer and not holds_place(KEYS[2], ARGV[1]) and redis.call('EXISTS', KEYS[5]) == 1 then
  return refused() or wait_for_turn(redis.call('PTTL', KEYS[5]))
end
local taken = take_place(KEYS[2], KEYS[3], KEYS[4], ARGV[1], tonumber(ARGV[2]), nil, quarantine_at(ARGV, 5), how ~= 'k')
if taken[1] == 1 then
  -- The readers' turn has come.
  redis.call('DEL', KEYS[6])
end
return taken
