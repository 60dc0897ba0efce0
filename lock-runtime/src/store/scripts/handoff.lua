-- Give one exclusive lock back and, when it becomes free, hand it straight
-- to a waiter of the releasing client, atomically: the waiter holds it when
-- the answer arrives, instead of being woken to try again (half a round
-- trip instead of one and a half, and one call instead of two).
--
-- The lock is handed on only when it would be taken at once by an
-- acquisition of the waiter (acquire.lua): the lock is not fair (fair
-- waiters are served in line), nobody holds or waits for its read side,
-- its hash slot is not in the restart quarantine, and it is not kept past
-- its release (`hold_at_least`). Waiters of other clients that marked it
-- ("w") keep their mark on the new holder, whose release announces itself;
-- they are not told of the handoff (the lock was never free). So that a
-- client with waiters of its own cannot pass the lock between them for
-- ever while others wait, a marked lock is handed on at most ARGV[7] times
-- in a row ("h" counts them; an acquisition starts it anew); after that it
-- is released and announced, and every waiter tries.
--
-- Otherwise it is a plain release (release.lua).
--
-- KEYS[1]      the lock hash
-- KEYS[2..4]   its release channel, queue of fair waiters and their
--              liveness (release.lua)
-- KEYS[5]      the fencing counter of the lock's hash slot
-- KEYS[6..8]   its readers, waiting-writer marker and waiting-readers
--              marker (acquire.lua)
-- ARGV[1..4]   the release's arguments (release.lua)
-- ARGV[5]      the waiter's owner id
-- ARGV[6]      the waiter's lease in milliseconds
-- ARGV[7]      how many handoffs in a row a marked lock may make
-- ARGV[8..10]  the restart quarantine: run id seen, ms, strict (fence.lua)
--
-- Returns {left, fence}: left as release.lua returns it for the releaser,
-- and the waiter's fencing token when the lock was handed on (0: not).
local held = redis.call('HMGET', KEYS[1], 'owner', 'count', 'fair', 'w', 'h')
local last = ARGV[2] == '1' or held[2] == '1'
local chain = tonumber(held[5] or '0')
if held[1] == ARGV[1] and last and not held[3] and ARGV[3] == '0'
    and (not held[4] or chain < tonumber(ARGV[7]))
    and redis.call('EXISTS', KEYS[6], KEYS[7], KEYS[8]) == 0 then
  local fence = next_fence(KEYS[5], quarantine_at(ARGV, 8))
  if fence then
    -- The hash is written over: a mark ("w") stays with the new holder.
    redis.call('HSET', KEYS[1], 'owner', ARGV[5], 'count', 1, 'fence', fence, 'h', chain + 1)
    redis.call('PEXPIRE', KEYS[1], ARGV[6])
    return {0, fence}
  end
end
local left = give_back({KEYS[1], KEYS[2], KEYS[3], KEYS[4]}, {ARGV[1], ARGV[2], ARGV[3], ARGV[4]})
return {left[1], 0}
