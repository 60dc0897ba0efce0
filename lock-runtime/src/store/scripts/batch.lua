
-- Runs several calls of the script above as one script call: calls of one
-- client that are ready at the same moment (see store/coalesce.rs), so that
-- Redis pays its per-call cost (parsing, dispatch, entering Lua, the reply)
-- once for all of them. Each call runs exactly as it would alone, in order,
-- and fails alone: an error (a key of the wrong type) becomes that call's
-- reply, as its message (a string, where the scripts run so reply with
-- arrays), not the batch's: an error reply inside an array would fail the
-- whole reply in the client. Except READONLY and OOM, which Redis raises at
-- the first write of a script call, before anything was written (or, for
-- a function that may write, before it runs at all): those fail the whole
-- call, as they would fail a lone one.
--
-- ARGV[1]              the number of calls, m
-- ARGV[2j], ARGV[2j+1] for the j-th call (j = 1..m), its number of keys and
--                      of arguments
-- then the arguments of every call, in order; KEYS holds every call's keys
-- in order.
--
-- Returns one reply per call.

-- The `count` elements of `list` after its first `from`, as a list of their
-- own (a call's keys or arguments). `unpack` builds it in C, at a fraction
-- of a Lua loop's cost per element, but returns at most a few thousand
-- values (Lua's C stack): a longer part (a call taking hundreds of locks at
-- once) is copied by the loop.
local function slice(list, from, count)
  if count <= 256 then
    return {unpack(list, from + 1, from + count)}
  end
  local part = {}
  for i = 1, count do
    part[i] = list[from + i]
  end
  return part
end

local m = tonumber(ARGV[1])
local results = {}
local k, a = 0, 1 + 2 * m
for j = 1, m do
  local nk, na = tonumber(ARGV[2 * j]), tonumber(ARGV[2 * j + 1])
  local keys, args = slice(KEYS, k, nk), slice(ARGV, a, na)
  k, a = k + nk, a + na
  local ok, reply = pcall(run, keys, args)
  local message = (not ok) and (type(reply) == 'table' and reply.err or tostring(reply))
  if ok then
    results[j] = reply
  elseif string.find(message, '^READONLY') or string.find(message, '^OOM')
      or string.find(message, '-READONLY ', 1, true) or string.find(message, '-OOM ', 1, true) then
    -- (Before Redis 7.0 the refused write reaches the script as an error
    -- whose message names the code after a '-': '@user_script: 1:
    -- -READONLY You can't write against a read only replica.')
    -- Refused at the first write of the whole script call (a replica; a
    -- server out of memory), so nothing was written: the batch fails as
    -- a whole, as a lone call would, so that the client follows a new
    -- master and sends it again.
    return redis.error_reply(message)
  else
    results[j] = message
  end
end
return results
