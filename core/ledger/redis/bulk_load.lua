-- bulk_load.lua -- the marker of a bulk load (docs/ledger.md, "Bulk load into
-- an empty Redis ledger"): `retryguard import` into an empty ledger records
-- the files in a temporary SQLite ledger and copies the result here, under
-- <prefix>bulk-load, which names its owner until the copy is complete.
--
-- KEYS[]   none: the keys are the prefix's (one Redis server, not Redis Cluster)
-- ARGV[1]  key prefix; ARGV[2] operation; ARGV[3] owner ("host pid start
--          directory"); ARGV[4] TTL of long-lived keys (s)
-- Returns  by operation:
-- claim    {'claimed', ''} when there is no marker and the ledger holds none
--          of the keys below (the marker is set to the owner); {'unfinished',
--          marker} when a marker is there; {'not_empty', key} otherwise
-- check    the same for a marker already the owner's: {'claimed', ''} while
--          the ledger is still empty, else {'not_empty', key} or
--          {'unfinished', marker} (another owner's)
-- finish   deletes the owner's marker: 1, or 0 when the marker is not the owner's
local P, op, owner = ARGV[1], ARGV[2], ARGV[3]
local mk = P .. 'bulk-load'
local cur = redis.call('GET', mk)
-- Every writer of the ledger writes one of these (ingest: counts, msgs, dests,
-- journalseq, seen-hours; the milters: msgs, identities-seq; the engine:
-- state, verdictmark, journal; a follower: pos). event_keyer is not one: every
-- connection writes it. Each is checked with a read of its type that a fleet's
-- ACL user may run (docs/ledger.md, "Running a fleet").
local STATE = {
  {'ZCARD', 'msgs'}, {'ZCARD', 'finished'}, {'ZCARD', 'dests'}, {'ZCARD', 'epsidx'}, {'ZCARD', 'journal'},
  {'ZCARD', 'outbox'}, {'ZCARD', 'seen-hours'}, {'ZCARD', 'seen'}, {'SCARD', 'open'}, {'SCARD', 'open-msgs'},
  {'HKEYS', 'counts'}, {'HKEYS', 'state'}, {'HKEYS', 'pos'}, {'HKEYS', 'verdicts'}, {'HKEYS', 'flags'},
  {'GET', 'journalseq'}, {'GET', 'verdictmark'}, {'GET', 'flagseq'}, {'GET', 'identities-seq'},
  {'XREVRANGE', 'identities-stream'}}
local function first_state_key()
  for _, c in ipairs(STATE) do
    local k = P .. c[2]
    local ok, r
    if c[1] == 'XREVRANGE' then
      ok, r = pcall(redis.call, 'XREVRANGE', k, '+', '-', 'COUNT', 1)
    else
      ok, r = pcall(redis.call, c[1], k)
    end
    -- a key of another type than the ledger writes is there all the same
    if not ok then return c[2] end
    if (type(r) == 'number' and r > 0) or (type(r) == 'table' and #r > 0) or type(r) == 'string' then
      return c[2]
    end
  end
  return nil
end
if op == 'claim' or op == 'check' then
  if cur and (op == 'claim' or cur ~= owner) then return {'unfinished', cur} end
  if op == 'check' and not cur then return {'unfinished', ''} end
  local k = first_state_key()
  if k then return {'not_empty', k} end
  if op == 'claim' then redis.call('SET', mk, owner, 'EX', ARGV[4]) end
  return {'claimed', ''}
end
if op == 'finish' then
  if cur ~= owner then return 0 end
  redis.call('DEL', mk)
  return 1
end
return redis.error_reply('bulk_load: unknown operation')
