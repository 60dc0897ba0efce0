-- The scripts as one library of Redis Functions (FUNCTION LOAD, run with
-- FCALL; Redis 7.0 and later, Valkey). Composed in mod.rs: after the line
-- naming it (LIBRARY) and the line setting PUBLISH come prelude.lua, the
-- helper files and this file, each once; then each script in a block of
-- its own, its body a function of KEYS and ARGV as under EVALSHA, with
-- batch.lua around it, both registered here.
--
-- Why a library: its helpers are made once, when it is loaded, where a
-- script run by EVALSHA makes each helper's closure anew at every call;
-- and what the scripts learn of the server (fence.lua: its run id, when it
-- started) is kept from call to call, so that the restart check reads
-- nothing once the server is known to have been up for the quarantine.
--
-- What the helpers keep for one call only is forgotten before each call
-- (`fresh`): the clock, which stands still during a call but not between
-- calls, the last arrival in a line and the last token drawn, and the
-- restart check's answer for the call's quarantine.
local function fresh()
  clock_us = nil
  arrived, drawn = 0, 0
  settled, last_save = nil, nil
end

-- Registers script `stem` as two functions: `LIBRARY_stem`, one call, and
-- `LIBRARY_stem_batch`, several calls as one (batch.lua). `flags`: Redis's
-- function flags. A script that gives back or keeps what is held runs with
-- 'allow-oom': a server out of memory still lets locks go, as it does the
-- DEL of a script run by EVALSHA (without it, Redis would refuse the whole
-- call up front). A script that only reads runs with 'no-writes', which a
-- replica accepts.
local function register(stem, run, batch, flags)
  redis.register_function{
    function_name = LIBRARY .. '_' .. stem,
    callback = function(keys, args)
      fresh()
      return run(keys, args)
    end,
    flags = flags,
  }
  redis.register_function{
    function_name = LIBRARY .. '_' .. stem .. '_batch',
    callback = function(keys, args)
      fresh()
      return batch(keys, args)
    end,
    flags = flags,
  }
end
