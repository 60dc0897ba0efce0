-- Extend many held locks in one round trip.
--
-- KEYS[i]        a lock hash
-- ARGV[2i - 1]   the owner id expected on KEYS[i]
-- ARGV[2i]       its lease in milliseconds
--
-- Returns one integer per key: 1 renewed, 0 no longer held by that owner.
local result = {}
for i, key in ipairs(KEYS) do
  -- A key overwritten with another type must fail alone, not the whole batch.
  if redis.call('TYPE', key).ok == 'hash'
      and redis.call('HGET', key, 'owner') == ARGV[2 * i - 1] then
    redis.call('PEXPIRE', key, ARGV[2 * i])
    result[i] = 1
  else
    result[i] = 0
  end
end
return result
