-- A fair waiter gives up its place in line; if the lock is free, the next
-- in line is told to take it.
--
-- KEYS[1]  the queue
-- KEYS[2]  the waiters' liveness
-- KEYS[3]  the lock hash
-- KEYS[4]  the release channel
-- ARGV[1]  owner id
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('ZREM', KEYS[2], ARGV[1])
if redis.call('EXISTS', KEYS[3]) == 0 then
  name_next(KEYS[4], KEYS[1], KEYS[2])
end
return 0
