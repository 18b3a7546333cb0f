-- ingest.lua -- apply one batch of log events and the follower position atomically
-- (Redis runs a script to completion or not at all, so a client killed mid-batch
-- leaves either the whole batch with its position or neither).
--
-- KEYS[1]  <prefix>seen: sorted set of applied event keys (score: event time, us)
-- ARGV[1]  key prefix; every other key is <prefix>... (one Redis server, not Redis Cluster)
-- ARGV[2]  TTL of per-message keys, seconds
-- ARGV[3]  TTL of long-lived keys (destinations, history, indexes), seconds
-- ARGV[4]  TTL of the seen set, seconds
-- ARGV[5]  follower source id, '' for none
-- ARGV[6]  follower position, JSON stored verbatim under <prefix>pos
-- ARGV[7]  number of events E, then E groups of 21 fields:
--          key kind time queue_id other_id text resent size nrcpt outcome recipient
--          domain relay code enhanced reason stage category category_bit journal host
--          (kind and outcome numbers: OpKind and Outcome in core/ledger/internal.hpp;
--          times: microseconds since the epoch, as decimal strings; journal: the
--          event's part of the engine journal batch entry, kept when the event is fresh)
-- Returns  {applied, duplicates, fresh, journal_seq} (fresh: a string of '1'/'0',
--          one per event; journal_seq: the seq of the journal entry 'B' .. the fresh
--          events' parts, appended to <prefix>journal; 0 when none was fresh)
-- XADD '*' and SSCAN are not deterministic: Redis 5 and 6 then need effects
-- replication (Redis 7 always uses it; the call is a no-op there).
if redis.replicate_commands then redis.replicate_commands() end
local P = ARGV[1]
local MTTL, KTTL, STTL = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local E = tonumber(ARGV[7])
local F = 21
if not E or #ARGV ~= 7 + E * F then return redis.error_reply('ingest: bad argument count') end

local function num(s) return tonumber(s) or 0 end
local function earliest(a, b) if not a or a == '' then return b end if num(b) < num(a) then return b end return a end
local function latest(a, b) if not a or a == '' then return b end if num(b) > num(a) then return b end return a end
local function blank(v) return (not v) or v == '' end
local touched = {}
local function long(k) touched[k] = true end

-- Written once per batch at the end (the script runs atomically, so nobody sees
-- the state in between): a message's 'updated', its TTL and its place in
-- <prefix>msgs; a destination's hash fields and its place in <prefix>dests.
-- A message has several events in a batch and a busy destination many.
local msg_updated = {}  -- queue id -> latest 'updated'
local msg_host = {}     -- queue id -> host written in this batch
local dest_rows = {}    -- dest key -> {row = fields as read or written, written = set of names}
local dest_scores = {}  -- 'kind\tname' -> latest 'updated'

local function msg(q, t)
  local k = P .. 'msg:' .. q
  local u = msg_updated[q]
  if not u then
    u = redis.call('HGET', k, 'updated')
    if not u then
      redis.call('HSET', k, 'queue_id', q, 'first_queue_id', q, 'state', 'incoming', 'size', '-1', 'nrcpt', '-1',
                 'updated', t)
      u = t
    end
  end
  msg_updated[q] = latest(u, t)
  return k
end

local function index(kind, value, q)
  local k = P .. kind .. ':' .. value
  redis.call('SADD', k, q)
  redis.call('EXPIRE', k, MTTL)
end

-- The milters' identity filters (docs/milter.md, "identity filter on Redis"):
-- a message with a new identity is listed in <prefix>open-msgs and the key goes
-- to the change stream, as record_identity.lua does.
local function identity_written(q, kind, value)
  redis.call('SADD', P .. 'open-msgs', q)
  long(P .. 'open-msgs')
  local seq = redis.call('INCR', P .. 'identities-seq')
  long(P .. 'identities-seq')
  redis.call('XADD', P .. 'identities-stream', 'MAXLEN', '~', 100000, '*', 's', seq,
             kind == 'mid' and 'm' or 'f', value)
  long(P .. 'identities-stream')
end

local function set_identity(k, q, field, kind, value)
  local old = redis.call('HGET', k, field)
  if old == value then return end
  if not blank(old) then redis.call('SREM', P .. kind .. ':' .. old, q) end
  redis.call('HSET', k, field, value)
  index(kind, value, q)
  identity_written(q, kind, value)
end

local function set_state(q, t, state, finishes)
  local k = msg(q, t)
  if redis.call('HEXISTS', k, 'finished') == 1 then return k end
  redis.call('HSET', k, 'state', state)
  if finishes then
    redis.call('HSET', k, 'finished', t)
    redis.call('ZADD', P .. 'finished', t, q)
    long(P .. 'finished')
  end
  return k
end

local function new_rcpt(q, a, d)
  return {queue_id = q, address = a, domain = d, state = 'pending', attempts = '0', first_attempt = '',
          last_attempt = '', first_deferral = '', reply_code = '0', enhanced = '', reply_text = '', stage = '',
          relay = '', category = 'unknown'}
end

local function rcpt_put(q, r)
  local k = P .. 'rcpt:' .. q
  if redis.call('HSET', k, r.address, cjson.encode(r)) == 1 then
    redis.call('HINCRBY', P .. 'counts', 'recipients', 1)
    long(P .. 'counts')
  end
  redis.call('EXPIRE', k, MTTL)
  local ak = P .. 'addr:' .. r.address
  redis.call('ZADD', ak, blank(r.last_attempt) and '0' or r.last_attempt, q)
  redis.call('EXPIRE', ak, MTTL)
end

local DEST_FIELDS = {'kind', 'name', 'last_success', 'last_deferral', 'ep_first', 'ep_last', 'ep_attempts',
                     'ep_messages', 'ep_categories', 'ep_last_reply', 'ep_last_relay', 'updated'}

-- A destination's hash, read once per batch (missing fields read as false).
local function dest(kind, name)
  local dk = P .. 'dest:' .. kind .. ':' .. name
  local e = dest_rows[dk]
  if not e then
    local v = redis.call('HMGET', dk, unpack(DEST_FIELDS))
    local row = {}
    for i, f in ipairs(DEST_FIELDS) do row[f] = v[i] end
    e = {row = row, written = {}}
    dest_rows[dk] = e
  end
  return e
end

local function dest_set(e, fields)
  for f, v in pairs(fields) do
    e.row[f] = v
    e.written[f] = true
  end
end

local function dest_touch(kind, name, updated)
  dest_scores[kind .. '\t' .. name] = updated
  long(P .. 'dests')
  long(P .. 'dest:' .. kind .. ':' .. name)
end

local function deferral(kind, name, first, ev)
  local mk = P .. 'destmsg:' .. kind .. ':' .. name
  local fresh = redis.call('SADD', mk, first)
  long(mk)
  local e = dest(kind, name)
  local d = e.row
  local ep_first = d.ep_first
  if blank(ep_first) then
    ep_first = ev.t
    redis.call('SADD', P .. 'open', kind .. '\t' .. name)
    long(P .. 'open')
  end
  dest_set(e, {kind = kind, name = name, last_deferral = latest(d.last_deferral, ev.t), ep_first = ep_first,
               ep_last = latest(d.ep_last, ev.t), ep_attempts = tostring(num(d.ep_attempts) + 1),
               ep_messages = tostring(num(d.ep_messages) + fresh),
               ep_categories = tostring(bit.bor(num(d.ep_categories), num(ev.catbit))), ep_last_reply = ev.reason,
               ep_last_relay = ev.relay, updated = latest(d.updated, ev.t)})
  dest_touch(kind, name, d.updated)
end

local function success(kind, name, t)
  local e = dest(kind, name)
  local d = e.row
  local m = kind .. '\t' .. name
  if not blank(d.ep_first) then
    local id = redis.call('HINCRBY', P .. 'counts', 'episode_ids', 1)
    redis.call('HINCRBY', P .. 'counts', 'episodes', 1)
    local ep = cjson.encode({id = tostring(id), first = d.ep_first, last = d.ep_last, ended = t,
                             attempts = d.ep_attempts, messages = d.ep_messages, categories = d.ep_categories,
                             last_reply = d.ep_last_reply, last_relay = d.ep_last_relay})
    local ek = P .. 'eps:' .. kind .. ':' .. name
    redis.call('ZADD', ek, t, ep)
    long(ek)
    redis.call('ZADD', P .. 'epsidx', 'NX', t, m)
    long(P .. 'epsidx')
    redis.call('DEL', P .. 'destmsg:' .. kind .. ':' .. name)
    redis.call('SREM', P .. 'open', m)
  end
  dest_set(e, {kind = kind, name = name, last_success = latest(d.last_success, t), ep_first = '', ep_last = '',
               ep_attempts = '0', ep_messages = '0', ep_categories = '0', ep_last_reply = '', ep_last_relay = '',
               updated = latest(d.updated, t)})
  dest_touch(kind, name, d.updated)
end

local OUTCOME = {['1'] = 'sent', ['2'] = 'pending', ['3'] = 'bounced', ['4'] = 'expired'}

local function delivery(ev)
  local k = msg(ev.q, ev.t)
  local first = redis.call('HGET', k, 'first_queue_id')
  local raw = redis.call('HGET', P .. 'rcpt:' .. ev.q, ev.rcpt)
  local r = raw and cjson.decode(raw) or new_rcpt(ev.q, ev.rcpt, ev.domain)
  r.state = OUTCOME[ev.outcome]
  r.attempts = tostring(num(r.attempts) + 1)
  r.first_attempt = earliest(r.first_attempt, ev.t)
  r.last_attempt = latest(r.last_attempt, ev.t)
  if ev.outcome == '2' and blank(r.first_deferral) then r.first_deferral = ev.t end
  r.reply_code = ev.code
  r.enhanced = ev.enhanced
  r.reply_text = ev.reason
  r.stage = ev.stage
  r.relay = ev.relay
  r.category = ev.category
  rcpt_put(ev.q, r)
  if ev.outcome == '2' then
    local s = redis.call('HMGET', k, 'finished', 'state')
    if blank(s[1]) and s[2] ~= 'hold' then redis.call('HSET', k, 'state', 'deferred') end
  end
  for _, dest in ipairs({{'domain', ev.domain}, {'relay', ev.relay}}) do
    if dest[2] ~= '' then
      if ev.outcome == '2' then deferral(dest[1], dest[2], first, ev)
      elseif ev.outcome == '1' then success(dest[1], dest[2], ev.t) end
    end
  end
end

local function pickup(ev)
  local k = msg(ev.q, ev.t)
  local arrival = redis.call('HGET', k, 'arrival')
  redis.call('HSET', k, 'sender', ev.text, 'arrival', earliest(arrival, ev.t))
  if ev.other ~= '' then redis.call('HSET', k, 'previous_queue_id', ev.other) end
  if ev.other == '' or ev.other == ev.q then return end
  -- postsuper -r: the successor inherits identity and still-pending recipients.
  local ok = msg(ev.other, ev.t)
  local o = redis.call('HMGET', ok, 'first_queue_id', 'message_id', 'fingerprint', 'arrival', 'size')
  local n = redis.call('HMGET', k, 'message_id', 'fingerprint', 'size')
  redis.call('HSET', k, 'first_queue_id', o[1])
  if blank(n[1]) and not blank(o[2]) then set_identity(k, ev.q, 'message_id', 'mid', o[2]) end
  if blank(n[2]) and not blank(o[3]) then set_identity(k, ev.q, 'fingerprint', 'fp', o[3]) end
  if not blank(o[4]) then redis.call('HSET', k, 'arrival', o[4]) end
  if num(n[3]) < 0 and o[5] then redis.call('HSET', k, 'size', o[5]) end
  local fin = redis.call('HGET', ok, 'finished')
  redis.call('HSET', ok, 'state', 'requeued', 'next_queue_id', ev.q)
  if blank(fin) then
    redis.call('HSET', ok, 'finished', ev.t)
    redis.call('ZADD', P .. 'finished', ev.t, ev.other)
    long(P .. 'finished')
  end
  local all = redis.call('HGETALL', P .. 'rcpt:' .. ev.other)
  for i = 1, #all, 2 do
    local r = cjson.decode(all[i + 1])
    if r.state == 'pending' and redis.call('HEXISTS', P .. 'rcpt:' .. ev.q, all[i]) == 0 then
      r.queue_id = ev.q
      rcpt_put(ev.q, r)
    end
  end
end

local function apply(ev)
  local kind = ev.kind
  if kind == '0' then return end
  if kind == '1' then return pickup(ev) end
  if kind == '4' then return delivery(ev) end
  if kind == '2' then
    local k = msg(ev.q, ev.t)
    if ev.resent == '1' and not blank(redis.call('HGET', k, 'message_id')) then return end
    return set_identity(k, ev.q, 'message_id', 'mid', ev.text)
  end
  if kind == '3' then
    local k = msg(ev.q, ev.t)
    local s = redis.call('HMGET', k, 'arrival', 'finished')
    redis.call('HSET', k, 'sender', ev.text, 'size', ev.size, 'nrcpt', ev.nrcpt)
    if blank(s[1]) then redis.call('HSET', k, 'arrival', ev.t) end
    if blank(s[2]) then redis.call('HSET', k, 'state', 'active') end
    return
  end
  if kind == '10' then
    local k = msg(ev.q, ev.t)
    redis.call('HSET', k, 'arrival', earliest(redis.call('HGET', k, 'arrival'), ev.t))
    return
  end
  if kind == '5' then return set_state(ev.q, ev.t, 'gone', true) end
  if kind == '6' then
    set_state(ev.q, ev.t, 'expired', true)
    local all = redis.call('HGETALL', P .. 'rcpt:' .. ev.q)
    for i = 1, #all, 2 do
      local r = cjson.decode(all[i + 1])
      if r.state == 'pending' then
        r.state = 'expired'
        rcpt_put(ev.q, r)
      end
    end
    return
  end
  if kind == '7' then return set_state(ev.q, ev.t, 'hold', false) end
  if kind == '8' then return set_state(ev.q, ev.t, 'deferred', false) end
  if kind == '9' then return set_state(ev.q, ev.t, 'rejected', true) end
end

local applied, duplicates = 0, 0
local fresh = {}
local journal = {'B'}
for i = 0, E - 1 do
  local b = 7 + i * F
  local ev = {key = ARGV[b + 1], kind = ARGV[b + 2], t = ARGV[b + 3], q = ARGV[b + 4], other = ARGV[b + 5],
              text = ARGV[b + 6], resent = ARGV[b + 7], size = ARGV[b + 8], nrcpt = ARGV[b + 9],
              outcome = ARGV[b + 10], rcpt = ARGV[b + 11], domain = ARGV[b + 12], relay = ARGV[b + 13],
              code = ARGV[b + 14], enhanced = ARGV[b + 15], reason = ARGV[b + 16], stage = ARGV[b + 17],
              category = ARGV[b + 18], catbit = ARGV[b + 19], journal = ARGV[b + 20],
              host = ARGV[b + 21]}
  if redis.call('ZADD', KEYS[1], 'NX', ev.t, ev.key) == 0 then
    duplicates = duplicates + 1
    fresh[#fresh + 1] = '0'
  else
    -- the log's host field names the host holding the queue id; it wins over
    -- the name the milter recorded
    if ev.kind ~= '0' and ev.host ~= '' then
      local k = msg(ev.q, ev.t)
      if msg_host[ev.q] ~= ev.host then
        msg_host[ev.q] = ev.host
        redis.call('HSET', k, 'host', ev.host)
      end
    end
    apply(ev)
    journal[#journal + 1] = ev.journal
    applied = applied + 1
    fresh[#fresh + 1] = '1'
  end
end
for q, u in pairs(msg_updated) do
  local k = P .. 'msg:' .. q
  redis.call('HSET', k, 'updated', u)
  redis.call('EXPIRE', k, MTTL)
  redis.call('ZADD', P .. 'msgs', u, q)
  long(P .. 'msgs')
end
for dk, e in pairs(dest_rows) do
  local args = {}
  for f in pairs(e.written) do
    args[#args + 1] = f
    args[#args + 1] = e.row[f]
  end
  if #args > 0 then redis.call('HSET', dk, unpack(args)) end
end
for m, u in pairs(dest_scores) do redis.call('ZADD', P .. 'dests', u, m) end
redis.call('EXPIRE', KEYS[1], STTL)
if ARGV[5] ~= '' then
  redis.call('HSET', P .. 'pos', ARGV[5], ARGV[6])
  long(P .. 'pos')
end
-- The engine journal (docs/ledger.md): sorted set scored by seq, members
-- '<seq>:<entry>' (unique even when two entries are equal).
local journal_seq = 0
if applied > 0 then
  journal_seq = redis.call('INCR', P .. 'journalseq')
  redis.call('ZADD', P .. 'journal', journal_seq, journal_seq .. ':' .. table.concat(journal))
  long(P .. 'journal')
  long(P .. 'journalseq')
end
for k in pairs(touched) do redis.call('EXPIRE', k, KTTL) end
return {applied, duplicates, table.concat(fresh), journal_seq}
