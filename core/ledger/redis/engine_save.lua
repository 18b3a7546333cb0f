-- engine_save.lua -- save the engine state and trim the journal it covers and
-- the verdict outbox entries already written, atomically.
--
-- KEYS[1]  <prefix>state (hash: key -> state bytes); KEYS[2] <prefix>journal;
-- KEYS[3]  <prefix>outbox
-- ARGV[1]  TTL of long-lived keys (s); ARGV[2] state key; ARGV[3] state value;
-- ARGV[4]  journal seq the state covers (entries with seq <= it are deleted)
-- ARGV[5]  outbox seq written (entries with seq <= it are deleted)
-- Returns  the number of journal entries deleted
redis.call('HSET', KEYS[1], ARGV[2], ARGV[3])
redis.call('EXPIRE', KEYS[1], tonumber(ARGV[1]))
if tonumber(ARGV[5]) > 0 then redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', ARGV[5]) end
return redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', ARGV[4])
