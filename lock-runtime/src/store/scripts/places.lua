-- Leased places: a read-write lock's readers (see prelude.lua; needs
-- fence.lua).

-- Takes or re-enters one place in a leased set: a read-write lock's readers
-- (a semaphore's holders, who may take several places each, have
-- permit_acquire.lua). `set` scores each holder by its lease expiry
-- (ms); `holders` keeps each one's re-entry count ("c:" owner) and token
-- ("f:" owner). Holders whose leases ran out are dropped first. A holder
-- that re-enters keeps its lease unless `lengthen`.
--
-- Returns {1, fence, count} when `owner` holds a place afterwards, or
-- {0, ms until the first lease runs out} when `limit` places are taken (or
-- {0, ms, 1} while the restart quarantine `q` keeps the slot closed).
local function take_place(set, holders, counter, owner, lease, limit, q, lengthen)
  local now = now_ms()
  -- (Most calls find none, and remove nothing: each call a script makes
  -- costs Redis on its one thread.)
  local expired = redis.call('ZRANGEBYSCORE', set, '-inf', now)
  if #expired > 0 then
    for _, gone in ipairs(expired) do
      redis.call('HDEL', holders, 'c:' .. gone, 'f:' .. gone)
    end
    redis.call('ZREMRANGEBYSCORE', set, '-inf', now)
  end

  if redis.call('ZSCORE', set, owner) then
    local count = redis.call('HINCRBY', holders, 'c:' .. owner, 1)
    local fence = tonumber(redis.call('HGET', holders, 'f:' .. owner))
    if lengthen then
      redis.call('ZADD', set, 'GT', now + lease, owner)
      keep_for(set, lease)
      keep_for(holders, lease)
    end
    return {1, fence, count}
  end
  if limit and redis.call('ZCARD', set) >= limit then
    local first = redis.call('ZRANGE', set, 0, 0, 'WITHSCORES')
    return {0, tonumber(first[2]) - now}
  end
  -- An owner id a give-back retired (its caller gave up): a late call,
  -- refused (see gone_key in prelude.lua).
  local gone = gone_key(set, owner)
  if redis.call('EXISTS', gone) == 1 then
    return {0, redis.call('PTTL', gone)}
  end
  local fence, closed = next_fence(counter, q)
  if not fence then
    return {0, closed, 1}
  end
  redis.call('ZADD', set, now + lease, owner)
  redis.call('HSET', holders, 'c:' .. owner, 1, 'f:' .. owner, fence)
  keep_for(set, lease)
  keep_for(holders, lease)
  return {1, fence, 1}
end

-- Whether `owner` holds a place in `set` whose lease has not run out.
local function holds_place(set, owner)
  local score = redis.call('ZSCORE', set, owner)
  return score and tonumber(score) > now_ms()
end

