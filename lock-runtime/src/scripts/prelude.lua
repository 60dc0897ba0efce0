-- Shared by every script (prepended to each when it is loaded).

-- The server's clock in milliseconds.
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- The next fencing token from `counter`. A new counter (first use of this
-- hash slot, or the server lost its data: a restart without persistence, an
-- eviction) starts from the server clock in microseconds, which is past every
-- token handed out before, so that tokens keep growing across the loss
-- (see keys.rs).
local function next_fence(counter)
  local fence = redis.call('INCR', counter)
  if fence == 1 then
    local t = redis.call('TIME')
    fence = tonumber(t[1]) * 1000000 + tonumber(t[2])
    redis.call('SET', counter, string.format('%d', fence))
  end
  return fence
end

-- Makes `key` live at least `ttl` more milliseconds, never less than it has.
local function keep_for(key, ttl)
  if redis.call('PTTL', key) < ttl then
    redis.call('PEXPIRE', key, ttl)
  end
end
