-- journal_append.lua -- append entries to the engine journal (ticks, commands).
--
-- KEYS[1]  <prefix>journal (sorted set: score seq, member '<seq>:<entry>');
-- KEYS[2]  <prefix>journalseq (counter)
-- ARGV[1]  TTL of long-lived keys (s); ARGV[2..] the entries, in order
-- Returns  the seq of the first entry (0 when none)
local first = 0
for i = 2, #ARGV do
  local seq = redis.call('INCR', KEYS[2])
  redis.call('ZADD', KEYS[1], seq, seq .. ':' .. ARGV[i])
  if first == 0 then first = seq end
end
if first ~= 0 then
  redis.call('EXPIRE', KEYS[1], tonumber(ARGV[1]))
  redis.call('EXPIRE', KEYS[2], tonumber(ARGV[1]))
end
return first
