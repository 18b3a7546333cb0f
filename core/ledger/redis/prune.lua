-- prune.lua -- one bounded pass of retention: finished and stale messages,
-- old episodes and flags, idle destinations, old event keys. The client calls it
-- until it reports nothing more to do, so Redis is never blocked for long.
--
-- KEYS[1]  <prefix>seen (event keys of builds before the per-hour seen sets)
-- ARGV[1]  key prefix; ARGV[2] finished-message cut (us); ARGV[3] stale-message cut (us);
-- ARGV[4]  episode/flag/destination cut (us); ARGV[5] seen-event cut (us); ARGV[6] limit per pass
-- Returns  {messages, recipients, episodes, flags, seen_events, more (1 = call again)}
local P = ARGV[1]
local limit = tonumber(ARGV[6])
local function blank(v) return (not v) or v == '' end
local more = 0
local doomed = {}
local list = redis.call('ZRANGEBYSCORE', P .. 'finished', '-inf', '(' .. ARGV[2], 'LIMIT', 0, limit)
if #list == limit then more = 1 end
for _, q in ipairs(list) do doomed[q] = true end
list = redis.call('ZRANGEBYSCORE', P .. 'msgs', '-inf', '(' .. ARGV[3], 'LIMIT', 0, limit)
if #list == limit then more = 1 end
for _, q in ipairs(list) do doomed[q] = true end
local messages, recipients = 0, 0
for q in pairs(doomed) do
  local k = P .. 'msg:' .. q
  local m = redis.call('HMGET', k, 'message_id', 'fingerprint')
  if not blank(m[1]) then redis.call('SREM', P .. 'mid:' .. m[1], q) end
  if not blank(m[2]) then redis.call('SREM', P .. 'fp:' .. m[2], q) end
  local addrs = redis.call('HKEYS', P .. 'rcpt:' .. q)
  for _, a in ipairs(addrs) do redis.call('ZREM', P .. 'addr:' .. a, q) end
  recipients = recipients + #addrs
  messages = messages + redis.call('DEL', k)
  redis.call('DEL', P .. 'rcpt:' .. q)
  redis.call('ZREM', P .. 'msgs', q)
  redis.call('ZREM', P .. 'finished', q)
end
if recipients > 0 then redis.call('HINCRBY', P .. 'counts', 'recipients', -recipients) end
local episodes = 0
list = redis.call('ZRANGEBYSCORE', P .. 'epsidx', '-inf', '(' .. ARGV[4], 'LIMIT', 0, limit)
if #list == limit then more = 1 end
for _, m in ipairs(list) do
  local tab = string.find(m, '\t', 1, true)
  local ek = P .. 'eps:' .. string.sub(m, 1, tab - 1) .. ':' .. string.sub(m, tab + 1)
  episodes = episodes + redis.call('ZREMRANGEBYSCORE', ek, '-inf', '(' .. ARGV[4])
  local first = redis.call('ZRANGE', ek, 0, 0, 'WITHSCORES')
  if #first == 0 then redis.call('ZREM', P .. 'epsidx', m)
  else redis.call('ZADD', P .. 'epsidx', first[2], m) end
end
if episodes > 0 then redis.call('HINCRBY', P .. 'counts', 'episodes', -episodes) end
local flags = 0
local cut = tonumber(ARGV[4])
local all = redis.call('HGETALL', P .. 'flags')
for i = 1, #all, 2 do
  local f = cjson.decode(all[i + 1])
  if (f.cleared_at ~= '' and tonumber(f.cleared_at) < cut) or (f.expires_at ~= '' and tonumber(f.expires_at) < cut) then
    flags = flags + redis.call('HDEL', P .. 'flags', all[i])
  end
end
list = redis.call('ZRANGEBYSCORE', P .. 'dests', '-inf', '(' .. ARGV[4], 'LIMIT', 0, limit)
for _, m in ipairs(list) do
  local tab = string.find(m, '\t', 1, true)
  local dk = P .. 'dest:' .. string.sub(m, 1, tab - 1) .. ':' .. string.sub(m, tab + 1)
  local d = redis.call('HMGET', dk, 'ep_first', 'state')
  if blank(d[1]) and (blank(d[2]) or d[2] == 'recovered') then
    redis.call('DEL', dk)
    redis.call('ZREM', P .. 'dests', m)
  end
end
local seen = redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', '(' .. ARGV[5])
-- Per-hour seen sets (ingest.lua) go whole: an hour whose end is at or before
-- the cut, so a key is kept up to an hour longer than seen_events.
local hour = math.floor(tonumber(ARGV[5]) / 3600000000)
list = redis.call('ZRANGEBYSCORE', P .. 'seen-hours', '-inf', '(' .. hour, 'LIMIT', 0, limit)
if #list == limit then more = 1 end
for _, h in ipairs(list) do
  local k = P .. 'seen:' .. h
  seen = seen + redis.call('SCARD', k)
  redis.call('DEL', k)
  redis.call('ZREM', P .. 'seen-hours', h)
end
return {messages, recipients, episodes, flags, seen, more}
