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
-- Tokens: max(counter + 1, server clock in microseconds). Acquisitions never
-- outpace a microsecond clock, so tokens follow the clock, and a counter that
-- comes back lower than tokens already handed out (a restart from an older
-- snapshot or an AOF that lost its last second, a backup restored, the
-- counter lost or evicted) still yields a token above every earlier one.
--
-- The quarantine: a server that restarted may have forgotten locks it
-- granted, while their holders, not told yet, go on working. So while the
-- server has been up for less than the quarantine, a slot stays closed:
-- * if its counter came through the restart (the counter exists but was not
--   created in this run of the server, which its `:born` marker, holding
--   the run id, would say): the slot was in use before the restart, and
--   locks granted after the snapshot that restored it may be forgotten,
--   so it is closed for every client;
-- * if it has no counter, or one created in this run, for the clients that
--   saw the server restart (its run id is not among those seen at connect)
--   or that `strict` says to treat so (see config.rs). A client that met the
--   server only after the restart may create the counter (it cannot know
--   better unless strict); the `:born` marker it leaves, until the
--   quarantine would end, keeps the slot closed for the clients that did
--   see the restart: without it they would find a counter and grant at
--   once, next to holders not told yet.
--
-- Uptime is read as one second less than INFO says: `uptime_in_seconds`
-- counts whole seconds from the whole second the server started in, so it
-- reads 1 as soon as the next second begins, maybe a few milliseconds after
-- the start. The quarantine may last up to a second longer; never shorter.
--
-- Read once per script call (a call may take many locks, see batch.lua).
local info_uptime, info_run_id = nil, nil
local function server_info()
  if not info_uptime then
    local info = redis.call('INFO', 'server')
    local seconds = tonumber(string.match(info, 'uptime_in_seconds:(%d+)'))
    info_uptime = math.max(seconds - 1, 0) * 1000
    info_run_id = string.match(info, 'run_id:(%x+)')
  end
  return info_uptime, info_run_id
end

-- Whether the server has surely been up for at least `ms` at `now` (ms),
-- without INFO, whose reply is long to build and to search: LASTSAVE is set
-- to the start when the server starts, and only moves forward from there
-- (at each save), so a LASTSAVE older than `ms` means an uptime of at least
-- `ms`. It counts whole seconds, rounded down, hence one more second. A
-- recent save says nothing, and INFO is asked (see next_fence). Answered
-- once per script call (a call may take many locks).
--
-- A server that refuses LASTSAVE (an ACL without it) or reports no save
-- time says nothing either: INFO decides.
local settled = nil
local function up_for_at_least(ms, now)
  if settled == nil then
    local last = redis.pcall('LASTSAVE')
    settled = type(last) == 'number' and last > 0 and now - last * 1000 - 1000 >= ms
  end
  return settled
end

local function next_fence(counter, q)
  local last = tonumber(redis.call('GET', counter) or '0') or 0
  local t = redis.call('TIME')
  local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
  if q.ms > 0 and not up_for_at_least(q.ms, math.floor(now_us / 1000)) then
    local uptime, run_id = server_info()
    if uptime < q.ms then
      local closed = q.ms - uptime
      local born = counter .. ':born'
      local saw_restart = q.strict or not string.find(q.seen, run_id, 1, true)
      if last > 0 and redis.call('GET', born) ~= run_id then
        return nil, closed
      end
      if saw_restart then
        return nil, closed
      end
      if last == 0 then
        -- Kept 2 s past the quarantine: uptime is read in whole seconds,
        -- and the marker must outlive every moment at which a later call
        -- still reads the uptime as within the quarantine, or that call
        -- would take the counter for one restored from before the start.
        redis.call('SET', born, run_id, 'PX', closed + 2000)
      end
    end
  end
  local fence = math.max(last + 1, now_us)
  redis.call('SET', counter, string.format('%d', fence))
  return fence
end

-- The restart quarantine from three arguments starting at `argv[i]` (a
-- script's ARGV: scripts run as a function of their KEYS and ARGV, see
-- mod.rs).
local function quarantine_at(argv, i)
  return {seen = argv[i], ms = tonumber(argv[i + 1]), strict = argv[i + 2] == '1'}
end

-- Makes `key` live at least `ttl` more milliseconds, never less than it has.
local function keep_for(key, ttl)
  if redis.call('PTTL', key) < ttl then
    redis.call('PEXPIRE', key, ttl)
  end
end

-- Takes or re-enters one place in a leased set: a read-write lock's readers
-- (a semaphore's holders, who may take several places each, have
-- permit_acquire.lua). `set` scores each holder by its lease expiry
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
