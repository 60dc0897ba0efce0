-- Raise fencing counters to at least a token handed out elsewhere (Redlock:
-- a lock granted by a majority of masters takes the largest of their tokens,
-- and every master that granted it learns that token, so that the next
-- majority, which shares a master with this one, counts on from above it).
--
-- KEYS[i]  a fencing counter
-- ARGV[i]  the token it must not stay below
--
-- Returns the number of counters raised.
local raised = 0
for i = 1, #KEYS do
  local current = tonumber(redis.call('GET', KEYS[i]) or '0')
  if current < tonumber(ARGV[i]) then
    redis.call('SET', KEYS[i], ARGV[i])
    raised = raised + 1
  end
end
return raised
