-- clear_flags.lua -- clear every active flag of a destination.
--
-- KEYS[1]  <prefix>flags (hash: id -> JSON)
-- ARGV[1]  TTL of long-lived keys (s); ARGV[2] destination; ARGV[3] time (us)
-- Returns  how many flags were cleared
local all = redis.call('HGETALL', KEYS[1])
local t = tonumber(ARGV[3])
local n = 0
for i = 1, #all, 2 do
  local f = cjson.decode(all[i + 1])
  if f.destination == ARGV[2] and f.cleared_at == '' and (f.expires_at == '' or tonumber(f.expires_at) > t) then
    f.cleared_at = ARGV[3]
    redis.call('HSET', KEYS[1], all[i], cjson.encode(f))
    n = n + 1
  end
end
if n > 0 then redis.call('EXPIRE', KEYS[1], tonumber(ARGV[1])) end
return n
