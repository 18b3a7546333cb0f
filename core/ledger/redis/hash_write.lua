-- hash_write.lua -- one field of a long-lived hash (engine state, verdict
-- counters, follower positions), written together with the key's TTL.
--
-- KEYS[1]  the hash
-- ARGV[1]  'set' or 'incr'; ARGV[2] field; ARGV[3] value (for 'incr': the integer delta);
-- ARGV[4]  TTL (s)
-- Returns  'set': 1; 'incr': the new value
local r = 1
if ARGV[1] == 'incr' then
  r = redis.call('HINCRBY', KEYS[1], ARGV[2], ARGV[3])
else
  redis.call('HSET', KEYS[1], ARGV[2], ARGV[3])
end
redis.call('EXPIRE', KEYS[1], tonumber(ARGV[4]))
return r
