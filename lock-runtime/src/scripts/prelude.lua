-- Shared by every script (prepended to each when it is loaded, after a line
-- that sets PUBLISH: 'SPUBLISH' on a Cluster, where release messages use
-- sharded pub/sub, 'PUBLISH' elsewhere).

-- The server's clock in milliseconds.
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- The next fencing token from `counter`, or nil and how long no lock may be
-- granted in the counter's hash slot (ms). `q` is the restart quarantine:
-- {seen = the run ids seen at connect, comma-separated, ms = its length,
-- strict = true/false}.
--
-- A new counter means the slot was never used, or the server lost its data
-- (a restart without persistence, an eviction). Locks granted before may then
-- still be held by holders not told yet, and granting them again before they
-- could have run out would make two holders: so while the server has been up
-- for less than the quarantine, the slot stays closed, if this client saw
-- the server restart (its run id is not among those seen at connect) or `strict`
-- says to assume so (see config.rs). Otherwise the counter starts from the
-- server clock in microseconds, which is past every token handed out before,
-- so that tokens keep growing across the loss (see keys.rs).
--
-- A client that met the server only after the restart may create the counter
-- during the quarantine (it cannot know better unless strict). The counter's
-- `:born` marker, kept until that client's quarantine would have ended, keeps
-- the slot closed for the clients that did see the restart: without it they
-- would find a counter and grant at once, next to holders not told yet.
local function server_info()
  local info = redis.call('INFO', 'server')
  return tonumber(string.match(info, 'uptime_in_seconds:(%d+)')) * 1000,
    string.match(info, 'run_id:(%x+)')
end

local function next_fence(counter, q)
  local born = counter .. ':born'
  if q.ms > 0 then
    local left = redis.call('PTTL', born)
    if left > 0 then
      local _, run_id = server_info()
      if q.strict or not string.find(q.seen, run_id, 1, true) then
        return nil, left
      end
    end
  end
  local fence = redis.call('INCR', counter)
  if fence ~= 1 then
    return fence
  end
  if q.ms > 0 then
    local uptime, run_id = server_info()
    if uptime < q.ms then
      if q.strict or not string.find(q.seen, run_id, 1, true) then
        redis.call('DEL', counter)
        return nil, q.ms - uptime
      end
      redis.call('SET', born, '1', 'PX', q.ms - uptime)
    end
  end
  local t = redis.call('TIME')
  fence = tonumber(t[1]) * 1000000 + tonumber(t[2])
  redis.call('SET', counter, string.format('%d', fence))
  return fence
end

-- The restart quarantine from three arguments starting at ARGV[i].
local function quarantine_at(i)
  return {seen = ARGV[i], ms = tonumber(ARGV[i + 1]), strict = ARGV[i + 2] == '1'}
end

-- Makes `key` live at least `ttl` more milliseconds, never less than it has.
local function keep_for(key, ttl)
  if redis.call('PTTL', key) < ttl then
    redis.call('PEXPIRE', key, ttl)
  end
end

-- Takes or re-enters one place in a leased set: a semaphore's permits or a
-- read-write lock's readers. `set` scores each holder by its lease expiry
-- (ms); `holders` keeps each one's re-entry count ("c:" owner) and token
-- ("f:" owner). Holders whose leases ran out are dropped first.
--
-- Returns {1, fence, count} when `owner` holds a place afterwards, or
-- {0, ms until the first lease runs out} when `limit` places are taken (or
-- {0, ms} while the restart quarantine `q` keeps the slot closed).
local function take_place(set, holders, counter, owner, lease, limit, q)
  local now = now_ms()
  for _, gone in ipairs(redis.call('ZRANGEBYSCORE', set, '-inf', now)) do
    redis.call('HDEL', holders, 'c:' .. gone, 'f:' .. gone)
  end
  redis.call('ZREMRANGEBYSCORE', set, '-inf', now)

  if redis.call('ZSCORE', set, owner) then
    local count = redis.call('HINCRBY', holders, 'c:' .. owner, 1)
    local fence = tonumber(redis.call('HGET', holders, 'f:' .. owner))
    redis.call('ZADD', set, 'GT', now + lease, owner)
    keep_for(set, lease)
    keep_for(holders, lease)
    return {1, fence, count}
  end
  if limit and redis.call('ZCARD', set) >= limit then
    local first = redis.call('ZRANGE', set, 0, 0, 'WITHSCORES')
    return {0, tonumber(first[2]) - now}
  end
  local fence, closed = next_fence(counter, q)
  if not fence then
    return {0, closed}
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

-- What a release announces: the owner id first in the lock's queue of fair
-- waiters, so that exactly that waiter wakes, or "released" for anyone.
local function next_in_line(queue)
  local first = redis.call('ZRANGE', queue, 0, 0)
  return first[1] or 'released'
end
