-- Take, re-enter, or wait for some of the N permits of a semaphore,
-- atomically: a holder takes all the permits it asks for or none.
--
-- KEYS[1]  the holders: a sorted set of owner ids scored by lease expiry (ms)
-- KEYS[2]  the semaphore's hash: for each holder its re-entry count
--          ("c:" owner), token ("f:" owner) and permits ("p:" owner); and
--          the semaphore's number of permits ("limit") and the permits all
--          its holders hold together ("taken")
-- KEYS[3]  the fencing counter of the semaphore's hash slot
-- ARGV[1]  owner id
-- ARGV[2]  lease in milliseconds
-- ARGV[3]  the semaphore's number of permits
-- ARGV[4]  how many of them the caller takes
-- ARGV[5]  how the caller asks (see acquire.lua): "0" afresh, "h" or "k"
--          (keeping its lease) re-entering permits it holds, which are
--          not taken afresh once it no longer holds them
-- ARGV[6..8]  the restart quarantine: run id seen, ms, strict (fence.lua)
--
-- The number of permits is recorded by the acquisition that finds the
-- semaphore empty, and lives as long as the semaphore has a holder: when the
-- last holder releases, or its lease runs out, the semaphore is forgotten,
-- its number of permits too, and the next acquisition records its own.
-- Holders written by a version that took one permit each (no "p:" field, no
-- "limit", no "taken") count as one permit each.
--
-- Returns:
--   {1, fence, count}  the caller holds its permits afterwards;
--   {0, ms}            too few permits are free: ms until the first
--                      holder's lease runs out;
--   {0, ms, 1}         the restart quarantine keeps the slot closed for
--                      ms more;
--   {-1, recorded, asked}  the semaphore exists with another number of
--                      permits than the caller's;
--   {-2, held, asked}  the caller re-enters, asking for more permits than
--                      it holds (a re-entry holds what the outer hold does);
--   {-3, limit, asked} the caller asks for none, or for more than there are;
--   {-4, 1}            the caller re-enters and no longer holds its permits.
local set, hash = KEYS[1], KEYS[2]
local owner, lease = ARGV[1], tonumber(ARGV[2])
local limit, take = tonumber(ARGV[3]), tonumber(ARGV[4])
if limit < 1 or take < 1 or take > limit then
  return {-3, limit, take}
end
local now = now_ms()

-- The permits `member` holds.
local function permits_of(member)
  return tonumber(redis.call('HGET', hash, 'p:' .. member) or '1')
end

-- Holders whose leases ran out give their permits back.
local gone = redis.call('ZRANGEBYSCORE', set, '-inf', now)
if #gone > 0 then
  local freed = 0
  for _, member in ipairs(gone) do
    freed = freed + permits_of(member)
    redis.call('HDEL', hash, 'c:' .. member, 'f:' .. member, 'p:' .. member)
  end
  redis.call('ZREMRANGEBYSCORE', set, '-inf', now)
  if redis.call('HEXISTS', hash, 'taken') == 1 then
    redis.call('HINCRBY', hash, 'taken', -freed)
  end
end

local taken = 0
if redis.call('ZCARD', set) == 0 then
  -- Nobody holds a permit: the semaphore, and its number of permits, are
  -- forgotten (a release by its last holder deleted them already).
  redis.call('DEL', set, hash)
else
  local recorded = tonumber(redis.call('HGET', hash, 'limit'))
  if recorded and recorded ~= limit then
    return {-1, recorded, limit}
  end
  taken = tonumber(redis.call('HGET', hash, 'taken'))
  if not taken then
    -- Holders of an older version, or the hash lost (evicted): count again.
    taken = 0
    for _, member in ipairs(redis.call('ZRANGE', set, 0, -1)) do
      taken = taken + permits_of(member)
    end
    redis.call('HSET', hash, 'taken', taken)
  end
end

if redis.call('ZSCORE', set, owner) then
  local held = permits_of(owner)
  if take > held then
    return {-2, held, take}
  end
  local count = redis.call('HINCRBY', hash, 'c:' .. owner, 1)
  local fence = tonumber(redis.call('HGET', hash, 'f:' .. owner))
  if ARGV[5] ~= 'k' then
    redis.call('ZADD', set, 'GT', now + lease, owner)
    keep_for(set, lease)
    keep_for(hash, lease)
  end
  return {1, fence, count}
end
if ARGV[5] ~= '0' then
  return {-4, 1}
end
if taken + take > limit then
  local first = redis.call('ZRANGE', set, 0, 0, 'WITHSCORES')
  return {0, tonumber(first[2]) - now}
end
-- An owner id a give-back retired (its caller gave up): a late call,
-- refused (see gone_key in prelude.lua).
local gone = gone_key(set, owner)
if redis.call('EXISTS', gone) == 1 then
  return {0, redis.call('PTTL', gone)}
end
local fence, closed = next_fence(KEYS[3], quarantine_at(ARGV, 6))
if not fence then
  return {0, closed, 1}
end
redis.call('ZADD', set, now + lease, owner)
redis.call('HSET', hash, 'c:' .. owner, 1, 'f:' .. owner, fence, 'p:' .. owner, take,
  'limit', limit, 'taken', taken + take)
keep_for(set, lease)
keep_for(hash, lease)
return {1, fence, 1}
