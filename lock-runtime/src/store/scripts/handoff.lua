-- Give one lock back and, when it becomes free, hand it straight to one of
-- the releasing client's waiters for it, atomically: that waiter holds it
-- when the answer arrives, instead of being woken to try again (half a
-- round trip instead of one and a half, and one call instead of two).
--
-- Which waiter: for a fair lock, the first in line (after dropping waiters
-- that stopped trying, see line.lua), if it is one of the offers; for a
-- plain lock, the first offer of a plain waiter; never an owner id a
-- give-back retired. The lock is handed on only
-- when that waiter's own acquisition would take it at once: nobody holds or
-- waits for its read side, its hash slot is not in the restart quarantine,
-- and it is not kept past its release (`hold_at_least`). Waiters of other
-- clients that marked it ("w") keep their mark on the new holder, whose
-- release announces itself; they are not told of the handoff (the lock was
-- never free). So that a client with waiters of its own cannot pass a plain
-- lock between them for ever while others wait, a marked plain lock is
-- handed on at most ARGV[5] times in a row ("h" counts them; an acquisition
-- starts it anew); after that it is released and announced, and every
-- waiter tries. A fair lock needs no such bound: its line decides.
--
-- Otherwise it is a plain release (release.lua).
--
-- Giving back every level (ARGV[2] "1"), it is safe to send again after a
-- call whose answer was lost: when that call handed the lock on, the lock
-- is found held by one of the offers, handed on by this releaser ("from"),
-- and the answer is given again.
--
-- KEYS[1]      the lock hash
-- KEYS[2]      the fencing counter of the lock's hash slot
-- Named from the hash, as release.lua and acquire.lua name them (see
-- line_of in line.lua): its line of waiters and their liveness, its
-- readers, waiting-writer marker and waiting-readers marker, and (by the
-- release, give_back below) its release channel.
-- ARGV[1..4]   the release's arguments (release.lua)
-- ARGV[5]      how many handoffs in a row a marked plain lock may make
-- ARGV[6]      m, the number of offers
-- ARGV[7..]    per offer: the waiter's owner id, its lease in milliseconds,
--              and "0" for a plain waiter, "1" for a fair one in line, or
--              "j" and a stay in line in ms ("j3000") for a fair one that
--              gets in line with this call, in the order made
-- then         the restart quarantine: run id seen, ms, strict (fence.lua)
--
-- Returns {left, fence, j}: left as release.lua returns it for the
-- releaser, and when the lock was handed on, the new holder's fencing token
-- and its offer's number j (otherwise 0, 0).
local m = tonumber(ARGV[6])
-- Offer j: owner id, lease, whether it is fair, and the stay in line of
-- one that gets in line with this call.
local function offer(j)
  local at = 7 + 3 * (j - 1)
  local how = ARGV[at + 2]
  return ARGV[at], ARGV[at + 1], how ~= '0', tonumber(string.match(how, '^j(%d+)$'))
end
local queue, alive = line_of(KEYS[1])
local readers = KEYS[1] .. ':readers'
local writer_waiting, readers_waiting = KEYS[1] .. ':writer-waiting', KEYS[1] .. ':readers-waiting'
local held = redis.call('HMGET', KEYS[1], 'owner', 'count', 'fair', 'w', 'h', 'from')
-- Whether the lock may go to offer j: nobody holds or waits for its read
-- side, and j's owner id is not retired (a waiter whose handoff answer was
-- lost gives up its owner id and retires it, see gone_key in prelude.lua;
-- this call may run after that, and must not hand the lock to an owner id
-- nobody uses any more). One call asks both.
local function clear(j)
  return redis.call('EXISTS', readers, writer_waiting, readers_waiting, gone_key(KEYS[1], (offer(j)))) == 0
end
if held[1] and held[1] ~= ARGV[1] and ARGV[2] == '1' and held[6] == ARGV[1] then
  for j = 1, m do
    if offer(j) == held[1] then
      return {0, tonumber(redis.call('HGET', KEYS[1], 'fence')), j}
    end
  end
end
-- Fair waiters of the releasing client that came while one of its tasks
-- held the lock get in line first, in their order, as fair_acquire.lua
-- puts a waiter in line, unless their owner id was retired: then the
-- release hands the lock to the first in line, which may be one of them.
-- (Their own first attempt would have cost Redis a call each.) Not one
-- that holds the lock: a call sent again, whose first run handed it the
-- lock, has answered above. The line's sets are made to last once, for
-- the longest stay among them.
local longest_stay = nil
for j = 1, m do
  local owner, _, _, stay = offer(j)
  if stay and owner ~= held[1] and redis.call('EXISTS', gone_key(KEYS[1], owner)) == 0 then
    get_in_line(queue, alive, owner, stay)
    longest_stay = math.max(longest_stay or stay, stay)
  end
end
if longest_stay then
  line_lasts(queue, alive, longest_stay)
end
if held[1] == ARGV[1] and (ARGV[2] == '1' or held[2] == '1') and ARGV[3] == '0' then
  local chosen, chain = nil, tonumber(held[5] or '0')
  if held[3] then
    local first = next_in_line(queue, alive)
    for j = 1, m do
      local owner, _, fair = offer(j)
      if fair and owner == first then
        if clear(j) then
          chosen = j
        end
        break
      end
    end
  elseif not held[4] or chain < tonumber(ARGV[5]) then
    for j = 1, m do
      local _, _, fair = offer(j)
      if not fair then
        if clear(j) then
          chosen = j
          break
        end
        -- Readers or their marks are in the way of every offer; otherwise
        -- this one is retired, and the next plain offer may take it.
        if redis.call('EXISTS', readers, writer_waiting, readers_waiting) > 0 then
          break
        end
      end
    end
  end
  if chosen then
    local fence = next_fence(KEYS[2], quarantine_at(ARGV, 7 + 3 * m))
    if fence then
      local owner, lease = offer(chosen)
      -- The hash is written over: `fair` and a mark ("w") stay. The new
      -- holder's place in line, if it has one, is over.
      if held[3] then
        redis.call('HSET', KEYS[1], 'owner', owner, 'count', 1, 'fence', fence, 'from', ARGV[1])
      else
        redis.call('HSET', KEYS[1], 'owner', owner, 'count', 1, 'fence', fence, 'h', chain + 1,
          'from', ARGV[1])
      end
      redis.call('ZREM', queue, owner)
      redis.call('ZREM', alive, owner)
      redis.call('PEXPIRE', KEYS[1], lease)
      return {0, fence, chosen}
    end
  end
end
local left = give_back({KEYS[1]}, {ARGV[1], ARGV[2], ARGV[3], ARGV[4]})
return {left[1], 0, 0}
