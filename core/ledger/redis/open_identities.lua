-- open_identities.lua -- one page of the identities of unfinished messages, for
-- the milters' identity filters (Ledger::for_each_open_identity). The scripts
-- that write an identity (record_identity.lua, ingest.lua) list its message in
-- <prefix>open-msgs; a message is taken off the list here, by the first scan
-- after it finished or expired, so the writers never need to.
--
-- KEYS[1]  <prefix>open-msgs (set of queue ids)
-- ARGV[1]  key prefix; ARGV[2] SSCAN cursor ('0' to start); ARGV[3] page size
-- Returns  {next cursor ('0' = done), flat array of Message-ID, fingerprint per open message}
--          (either may be '')
-- XADD '*' and SSCAN are not deterministic: Redis 5 and 6 then need effects
-- replication (Redis 7 always uses it; the call is a no-op there).
if redis.replicate_commands then redis.replicate_commands() end
local P = ARGV[1]
local PENDING = {incoming = true, active = true, deferred = true, hold = true}
local page = redis.call('SSCAN', KEYS[1], ARGV[2], 'COUNT', tonumber(ARGV[3]))
local out = {}
for _, q in ipairs(page[2]) do
  local m = redis.call('HMGET', P .. 'msg:' .. q, 'state', 'finished', 'message_id', 'fingerprint')
  if m[1] and PENDING[m[1]] and (not m[2] or m[2] == '') and ((m[3] or '') ~= '' or (m[4] or '') ~= '') then
    out[#out + 1] = m[3] or ''
    out[#out + 1] = m[4] or ''
  else
    redis.call('SREM', KEYS[1], q)
  end
end
return {page[1], out}
