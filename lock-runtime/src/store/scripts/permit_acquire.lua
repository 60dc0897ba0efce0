-- Take, re-enter, or wait for one of N permits of a semaphore, atomically.
--
-- KEYS[1]  the permits: a sorted set of holders scored by lease expiry (ms)
-- KEYS[2]  the holders' re-entry counts and tokens
-- KEYS[3]  the fencing counter of the semaphore's hash slot
-- ARGV[1]  owner id
-- ARGV[2]  lease in milliseconds
-- ARGV[3]  number of permits
-- ARGV[4..6]  the restart quarantine: run id seen, ms, strict (prelude)
--
-- Returns {1, fence, count} when the caller holds a permit afterwards, or
-- {0, ms} with the time until the first permit's lease runs out.
return take_place(
  KEYS[1], KEYS[2], KEYS[3], ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), quarantine_at(4))
