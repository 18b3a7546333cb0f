-- record_identity.lua -- the milter records an accepted message's identity and
-- recipients under its queue id, so later resends can be recognised.
--
-- KEYS[1]  <prefix>msg:<queue_id>
-- ARGV[1]  key prefix; ARGV[2] TTL of per-message keys (s); ARGV[3] TTL of long-lived keys (s)
-- ARGV[4]  queue id; ARGV[5] normalised Message-ID ('' = none); ARGV[6] fingerprint ('' = none)
-- ARGV[7]  sender ('' = none); ARGV[8] time (us); ARGV[9] the recording host's name ('' = none;
--          kept only while the log has not named the host); then pairs: recipient address, its domain
-- Returns  the number of recipients newly recorded
--
-- Also lists the message in <prefix>open-msgs and appends its keys to
-- <prefix>identities-stream (see open_identities.lua and docs/milter.md, "identity
-- filter on Redis"), so every milter of the fleet learns them within milliseconds.
-- XADD '*' and SSCAN are not deterministic: Redis 5 and 6 then need effects
-- replication (Redis 7 always uses it; the call is a no-op there).
if redis.replicate_commands then redis.replicate_commands() end
local P, MTTL, KTTL = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local q, mid, fp, sender, t, host = ARGV[4], ARGV[5], ARGV[6], ARGV[7], ARGV[8], ARGV[9]
if not host or (#ARGV - 9) % 2 ~= 0 then return redis.error_reply('record_identity: bad argument count') end
local k = KEYS[1]
local function num(s) return tonumber(s) or 0 end
local function blank(v) return (not v) or v == '' end
local cur = redis.call('HMGET', k, 'updated', 'arrival', 'message_id', 'fingerprint', 'host', 'state', 'finished')
if not cur[1] then
  redis.call('HSET', k, 'queue_id', q, 'first_queue_id', q, 'state', 'incoming', 'size', '-1', 'nrcpt', '-1',
             'updated', t, 'arrival', t)
else
  if num(t) > num(cur[1]) then redis.call('HSET', k, 'updated', t) end
  if blank(cur[2]) or num(t) < num(cur[2]) then redis.call('HSET', k, 'arrival', t) end
end
local function identity(field, kind, value, old)
  if blank(value) or value == old then return end
  if not blank(old) then redis.call('SREM', P .. kind .. ':' .. old, q) end
  redis.call('HSET', k, field, value)
  -- <prefix>fp:<fingerprint> lists only copies the queue manager has picked up
  -- and that have not finished (see ingest.lua): the log may come first.
  if kind == 'fp' and (blank(cur[6]) or cur[6] == 'incoming' or not blank(cur[7])) then return end
  redis.call('SADD', P .. kind .. ':' .. value, q)
  redis.call('EXPIRE', P .. kind .. ':' .. value, MTTL)
end
identity('message_id', 'mid', mid, cur[3])
identity('fingerprint', 'fp', fp, cur[4])
if not blank(mid) or not blank(fp) then
  redis.call('SADD', P .. 'open-msgs', q)
  redis.call('EXPIRE', P .. 'open-msgs', KTTL)
  -- seq: consecutive numbers, so a reader sees a change it missed (a trimmed
  -- stream, a Redis restarted without its data) as a gap; 100000 entries as
  -- in ingest.lua
  local seq = redis.call('INCR', P .. 'identities-seq')
  redis.call('EXPIRE', P .. 'identities-seq', KTTL)
  redis.call('XADD', P .. 'identities-stream', 'MAXLEN', '~', 100000, '*', 's', seq, 'm', mid, 'f', fp)
  redis.call('EXPIRE', P .. 'identities-stream', KTTL)
end
if not blank(sender) then redis.call('HSET', k, 'sender', sender) end
if blank(cur[5]) and not blank(host) then redis.call('HSET', k, 'host', host) end
redis.call('EXPIRE', k, MTTL)
redis.call('ZADD', P .. 'msgs', (cur[1] and num(cur[1]) > num(t)) and cur[1] or t, q)
redis.call('EXPIRE', P .. 'msgs', KTTL)
local added = 0
local rk = P .. 'rcpt:' .. q
for i = 10, #ARGV, 2 do
  local a = ARGV[i]
  if redis.call('HEXISTS', rk, a) == 0 then
    redis.call('HSET', rk, a, cjson.encode({queue_id = q, address = a, domain = ARGV[i + 1], state = 'pending',
      attempts = '0', first_attempt = '', last_attempt = '', first_deferral = '', reply_code = '0', enhanced = '',
      reply_text = '', stage = '', relay = '', category = 'unknown'}))
    redis.call('ZADD', P .. 'addr:' .. a, 0, q)
    redis.call('EXPIRE', P .. 'addr:' .. a, MTTL)
    added = added + 1
  end
end
if added > 0 then
  redis.call('HINCRBY', P .. 'counts', 'recipients', added)
  redis.call('EXPIRE', P .. 'counts', KTTL)
end
redis.call('EXPIRE', rk, MTTL)
return added
