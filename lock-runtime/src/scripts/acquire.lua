-- Take, re-enter, or report who holds one or more locks, atomically: all of
-- them or none, so that callers naming the same locks in any order never
-- deadlock.
--
-- KEYS[1..n]       the lock hashes (owner, count, fence), n = #KEYS / 2
-- KEYS[n+1..2n]    the fencing counter of each lock's hash slot (see keys.rs)
-- ARGV[1]          owner id (client uuid : scope id)
-- ARGV[2]          lease in milliseconds
--
-- Returns {1, fence_1, count_1, ..., fence_n, count_n} when the caller holds
-- every lock afterwards, or {0, pttl} with the longest remaining lease among
-- the locks another owner holds (-1 when one of them has no expiry).
local n = #KEYS / 2
local longest = nil
for i = 1, n do
  local owner = redis.call('HGET', KEYS[i], 'owner')
  if owner and owner ~= ARGV[1] then
    local ttl = redis.call('PTTL', KEYS[i])
    if ttl < 0 or longest == -1 then
      longest = -1
    elseif not longest or ttl > longest then
      longest = ttl
    end
  end
end
if longest then
  return {0, longest}
end

local result = {1}
for i = 1, n do
  local fence, count
  if redis.call('HGET', KEYS[i], 'owner') then
    count = redis.call('HINCRBY', KEYS[i], 'count', 1)
    fence = tonumber(redis.call('HGET', KEYS[i], 'fence'))
    -- A nested holder may ask for a longer lease; never shorten the outer one.
    keep_for(KEYS[i], tonumber(ARGV[2]))
  else
    fence = next_fence(KEYS[n + i])
    count = 1
    redis.call('HSET', KEYS[i], 'owner', ARGV[1], 'count', 1, 'fence', fence)
    redis.call('PEXPIRE', KEYS[i], ARGV[2])
  end
  result[2 * i] = fence
  result[2 * i + 1] = count
end
return result
