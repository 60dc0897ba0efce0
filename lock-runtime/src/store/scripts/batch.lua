
-- Runs several calls of the script above as one script call: calls of one
-- client that are ready at the same moment (see store/coalesce.rs), so that
-- Redis pays its per-call cost (parsing, dispatch, entering Lua, the reply)
-- once for all of them. Each call runs exactly as it would alone, in order,
-- and fails alone: an error (a key of the wrong type) becomes that call's
-- reply, as its message (a string, where the scripts run so reply with
-- arrays), not the batch's: an error reply inside an array would fail the
-- whole reply in the client.
--
-- ARGV[1]              the number of calls, m
-- ARGV[2j], ARGV[2j+1] for the j-th call (j = 1..m), its number of keys and
--                      of arguments
-- then the arguments of every call, in order; KEYS holds every call's keys
-- in order.
--
-- Returns one reply per call.
local m = tonumber(ARGV[1])
local results = {}
local k, a = 0, 1 + 2 * m
for j = 1, m do
  local nk, na = tonumber(ARGV[2 * j]), tonumber(ARGV[2 * j + 1])
  local keys, args = {}, {}
  for i = 1, nk do
    keys[i] = KEYS[k + i]
  end
  for i = 1, na do
    args[i] = ARGV[a + i]
  end
  k, a = k + nk, a + na
  local ok, reply = pcall(run, keys, args)
  if ok then
    results[j] = reply
  elseif type(reply) == 'table' and reply.err then
    results[j] = reply.err
  else
    results[j] = tostring(reply)
  end
end
return results
