-- The fencing tokens and the restart quarantine: for the scripts that grant
-- locks (see prelude.lua).

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
-- What the scripts learn of the server itself: its run id, and a time its
-- start surely came before (ms: `started_by`). Under EVALSHA, the Lua state
-- of one script call holds them, and they are learnt anew at every call.
-- In the library (FCALL, see library.lua) they are kept from call to call
-- for as long as the library is loaded: a server that restarts loads it
-- anew, with nothing learnt, so nothing learnt survives a restart; nor a
-- `FUNCTION LOAD REPLACE`, nor a full resynchronisation of a replica, which
-- loads its master's library. There, INFO is read once, and once the server
-- is known to have been up for the quarantine, no acquisition reads INFO,
-- LASTSAVE or the `:up` mark again.
local run_id, started_by = nil, nil

-- Notes that the server started before `at` (ms): the earliest such time
-- learnt so far is kept.
local function started_before(at)
  if not started_by or at < started_by then
    started_by = at
  end
end

-- The server's uptime at `now` (ms) and its run id, read from INFO the
-- first time (see above).
local function server_info(now)
  if not run_id then
    local info = redis.call('INFO', 'server')
    local seconds = tonumber(string.match(info, 'uptime_in_seconds:(%d+)'))
    started_before(now - math.max(seconds - 1, 0) * 1000)
    run_id = string.match(info, 'run_id:(%x+)')
  end
  return now - started_by, run_id
end

-- Whether the server has surely been up for at least `ms` at `now` (ms),
-- without INFO, whose reply is long to build and to search. LASTSAVE is
-- set to the start when the server starts, and only moves forward from
-- there (at each save), so:
-- * a LASTSAVE older than `ms` means an uptime of at least `ms` (it counts
--   whole seconds, rounded down, hence one more second);
-- * after a recent save, the slot's `:up` mark says so: a call that read
--   INFO and found the server up for at least its quarantine leaves the
--   LASTSAVE it saw there, with that quarantine (see mark_up). As long as
--   LASTSAVE still reads the same, the server has not restarted since: a
--   restart sets LASTSAVE to its start, which comes after every mark left
--   before it (a mark is only left once LASTSAVE's second is over), so a
--   mark restored from a snapshot or an AOF never matches. (A replica
--   promoted in a failover reads its own LASTSAVE; its master's mark
--   matches only if the replica started or saved in the second the
--   master's LASTSAVE reads, and its data came from that master: it has
--   forgotten only what replication lost, which no quarantine covers.)
-- Otherwise INFO is asked (see next_fence). Answered once per script call
-- (a call may take many locks), and at once for every slot: uptime is the
-- server's. Each answer also says when the server started at the latest
-- (`started_by`), which the library keeps: there, once the server has been
-- up for the quarantine, the question costs nothing.
--
-- The mark is the server's, `PREFIXfence:up` (up_key): after a save, one
-- call reads INFO and every lock of the server goes on without. On a
-- Cluster, where a script may use only keys of its own slot, it is the
-- slot's, `PREFIXfence:{T}:up`: one INFO per slot used after each save.
--
-- A server that refuses LASTSAVE (an ACL without it) or reports no save
-- time says nothing either: INFO decides.
local function up_key(counter)
  if PUBLISH == 'SPUBLISH' then
    return counter .. ':up'
  end
  local prefix = string.match(counter, '^(.*fence:){')
  return prefix and prefix .. 'up' or counter .. ':up'
end

local settled, last_save = nil, nil
local function up_for_at_least(ms, now, counter)
  if started_by and now - started_by >= ms then
    return true
  end
  if settled == nil then
    local last = redis.pcall('LASTSAVE')
    if type(last) ~= 'number' or last <= 0 then
      settled = false
    elseif now - last * 1000 - 1000 >= ms then
      started_before((last + 1) * 1000)
      settled = true
    else
      last_save = last
      local mark = redis.call('GET', up_key(counter))
      local saw, length = string.match(mark or '', '^(%d+):(%d+)$')
      settled = tonumber(saw) == last and tonumber(length) >= ms
      if settled then
        started_before(now - tonumber(length))
      end
    end
  end
  return settled
end

-- Leaves the `:up` mark of the server or `counter`'s slot (see up_for_at_least): the
-- server read as up for at least `ms` at `now`, with LASTSAVE reading as
-- before. Not within LASTSAVE's own second: a restart in that second would
-- read the same LASTSAVE and find the mark in the snapshot it loaded.
local function mark_up(counter, ms, now)
  if last_save and now >= (last_save + 1) * 1000 then
    redis.call('SET', up_key(counter), string.format('%d:%d', last_save, ms))
  end
end

-- The last token drawn in this script call: the clock stands still during a
-- call (see now_us), and tokens of different locks drawn in one call (a
-- batch, a multi-lock) are kept apart, as they were when each read the
-- clock anew.
local drawn = 0
local function next_fence(counter, q)
  local now = now_us()
  if q.ms > 0 and not up_for_at_least(q.ms, math.floor(now / 1000), counter) then
    local last = tonumber(redis.call('GET', counter) or '0') or 0
    local uptime, run_id = server_info(math.floor(now / 1000))
    if uptime >= q.ms then
      mark_up(counter, q.ms, math.floor(now / 1000))
    else
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
  -- The token is written and the counter read in one call (Redis runs
  -- each call a script makes at a cost of its own): the clock is almost
  -- always ahead of the counter, and when it is not (a clock set back, a
  -- counter raised by Redlock, or tokens drawn faster than it ticks), the
  -- counter is written once more, above what it held.
  local fence = math.max(now, drawn + 1)
  local last = tonumber(redis.call('SET', counter, string.format('%d', fence), 'GET') or '0') or 0
  if last >= fence then
    fence = last + 1
    redis.call('SET', counter, string.format('%d', fence))
  end
  drawn = fence
  return fence
end

-- The restart quarantine from three arguments starting at `argv[i]` (a
-- script's ARGV: scripts run as a function of their KEYS and ARGV, see
-- mod.rs).
local function quarantine_at(argv, i)
  return {seen = argv[i], ms = tonumber(argv[i + 1]), strict = argv[i + 2] == '1'}
end

