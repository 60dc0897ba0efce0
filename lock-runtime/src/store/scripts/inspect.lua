-- Read everything an operator wants to know about one lock, as one atomic
-- snapshot: who holds it (the lock hash, a semaphore's permits, a read-write
-- lock's readers) and who waits for it. Reads only; keys of a type no lock
-- script writes are left alone, so a stray key cannot make this fail.
--
-- KEYS[1]  the lock: a hash (owner, count, fence, and `fair` for a fair
--          lock) or, for a semaphore, a sorted set of permits scored by
--          lease expiry (ms)
-- KEYS[2]  the semaphore holders' re-entry counts, tokens and permits, and
--          the semaphore's number of permits ("limit")
-- KEYS[3]  the readers of a read-write lock (sorted set scored by expiry)
-- KEYS[4]  the readers' re-entry counts and tokens
-- KEYS[5]  the line of waiters (fair ones, and a plain lock's while it is
--          held), in arrival order
-- KEYS[6]  the waiters' liveness (sorted set scored by expiry)
-- KEYS[7]  the release channel (a key here only so that a Cluster runs
--          this on the master of the lock's slot, where its sharded
--          subscribers are)
--
-- Returns {type of KEYS[1], fair (0 or 1), holders, queue, subscribers,
-- limit}: `holders` is a flat list of six items per holder: how it holds
-- ("x" the lock hash, "p" permits, "r" a read lock), owner id, re-entry
-- count, fencing token, remaining lease in ms (-1: none), and permits held
-- (1 but for a semaphore's holders); `queue` lists the waiters still in
-- line, first first; `subscribers` counts the connections subscribed to
-- the release channel; `limit` is a semaphore's number of permits, as its
-- holders recorded it (0: none recorded).
local now = now_ms()
local function type_of(key)
  return redis.call('TYPE', key)['ok']
end

local holders = {}
local function add(how, owner, count, fence, ttl, permits)
  local entry = {how, owner, count or '0', fence or '0', ttl, permits or '1'}
  for i = 1, 6 do
    holders[#holders + 1] = entry[i]
  end
end

-- Places in a leased set whose lease has not run out yet.
local function places(how, set, counts)
  if type_of(set) ~= 'zset' then
    return
  end
  local counted = type_of(counts) == 'hash'
  local all = redis.call('ZRANGE', set, 0, -1, 'WITHSCORES')
  for i = 1, #all, 2 do
    local owner, expiry = all[i], tonumber(all[i + 1])
    if expiry > now then
      local count, fence, permits = false, false, false
      if counted then
        count = redis.call('HGET', counts, 'c:' .. owner)
        fence = redis.call('HGET', counts, 'f:' .. owner)
        permits = redis.call('HGET', counts, 'p:' .. owner)
      end
      add(how, owner, count, fence, expiry - now, permits)
    end
  end
end

local lock_type = type_of(KEYS[1])
local fair = 0
local limit = 0
if lock_type == 'hash' then
  local held = redis.call('HMGET', KEYS[1], 'owner', 'count', 'fence', 'fair')
  if held[1] then
    add('x', held[1], held[2], held[3], redis.call('PTTL', KEYS[1]))
  end
  if held[4] then
    fair = 1
  end
elseif lock_type == 'zset' then
  places('p', KEYS[1], KEYS[2])
  if type_of(KEYS[2]) == 'hash' then
    limit = tonumber(redis.call('HGET', KEYS[2], 'limit') or '0') or 0
  end
end
places('r', KEYS[3], KEYS[4])

-- Waiters that stopped trying are still in line until a fair acquisition
-- of the free lock, or a release, prunes them: leave them out.
local queue = {}
if type_of(KEYS[5]) == 'zset' and type_of(KEYS[6]) == 'zset' then
  for _, owner in ipairs(redis.call('ZRANGE', KEYS[5], 0, -1)) do
    local alive = redis.call('ZSCORE', KEYS[6], owner)
    if alive and tonumber(alive) > now then
      queue[#queue + 1] = owner
    end
  end
end

local numsub = 'NUMSUB'
if PUBLISH == 'SPUBLISH' then
  numsub = 'SHARDNUMSUB'
end
local subscribers = redis.call('PUBSUB', numsub, KEYS[7])[2]
return {lock_type, fair, holders, queue, subscribers, limit}
