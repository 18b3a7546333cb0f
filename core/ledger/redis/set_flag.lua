-- set_flag.lua -- add a flag on a destination.
--
-- KEYS[1]  <prefix>flags (hash: id -> JSON); KEYS[2] <prefix>flagseq (counter)
-- ARGV[1]  TTL of long-lived keys (s); ARGV[2] destination; ARGV[3] reason;
-- ARGV[4]  set_at (us); ARGV[5] expires_at (us, '' = never); ARGV[6] cleared_at (us, '' = not cleared)
-- Returns  the new flag's id
local id = redis.call('INCR', KEYS[2])
redis.call('HSET', KEYS[1], tostring(id), cjson.encode({id = tostring(id), destination = ARGV[2], reason = ARGV[3],
  set_at = ARGV[4], expires_at = ARGV[5], cleared_at = ARGV[6]}))
redis.call('EXPIRE', KEYS[1], tonumber(ARGV[1]))
redis.call('EXPIRE', KEYS[2], tonumber(ARGV[1]))
return id
