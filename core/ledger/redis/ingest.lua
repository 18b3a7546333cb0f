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
--
-- The batch's rows are read once and written once: a message's hash and its
-- recipients are loaded on first use into Lua tables, changed there, and
-- written back with one HSET each at the end (the script is atomic, so nobody
-- sees the state in between); the replay check is one ZMSCORE and one ZADD for
-- the whole batch. Per event only the sets and streams that must change are
-- touched.
if redis.replicate_commands then redis.replicate_commands() end
local P = ARGV[1]
local MTTL, KTTL, STTL = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local E = tonumber(ARGV[7])
local F = 21
if not E or #ARGV ~= 7 + E * F then return redis.error_reply('ingest: bad argument count') end
-- The batch's garbage is small next to the time the incremental collector
-- spends walking the batch's live tables again and again while they grow: it
-- is collected once, after the script (restarted below, also when the batch
-- fails).
collectgarbage('stop')
-- Everything below runs under pcall so that the collector is restarted
-- whatever happens (an error reply from a command, out of memory).
local ok, result = pcall(function()

  local function num(s) return tonumber(s) or 0 end
  local function earliest(a, b) if not a or a == '' then return b end if num(b) < num(a) then return b end return a end
  local function latest(a, b) if not a or a == '' then return b end if num(b) > num(a) then return b end return a end
  local function blank(v) return (not v) or v == '' end
  local touched = {}
  local function long(k) touched[k] = true end

  -- Messages of the batch: queue id -> {row = the hash's fields, dirty = set of
  -- changed field names}, loaded on first use with one HGETALL.
  local M = {}
  local function mrow(q)
    local m = M[q]
    if not m then
      local all = redis.call('HGETALL', P .. 'msg:' .. q)
      local row = {}
      for i = 1, #all, 2 do row[all[i]] = all[i + 1] end
      m = {row = row, dirty = {}}
      M[q] = m
    end
    return m
  end
  local function mget(q, f) return mrow(q).row[f] end
  local function mput(q, f, v)
    local m = mrow(q)
    m.row[f] = v
    m.dirty[f] = true
  end

  -- A message touched by an event: created when unknown; its 'updated' is the
  -- latest event time of the batch (written at the end).
  local function msg(q, t)
    local m = mrow(q)
    if not m.row.updated then
      for f, v in pairs({queue_id = q, first_queue_id = q, state = 'incoming', size = '-1', nrcpt = '-1', updated = t}) do
        mput(q, f, v)
      end
    elseif num(t) > num(m.row.updated) then
      mput(q, 'updated', t)
    end
    m.touched = true
    return q
  end

  -- Recipients of the batch's messages: queue id -> {rows = address -> decoded
  -- row or false (absent), dirty = set of addresses}, each row fetched once.
  local R = {}
  local new_recipients = 0
  local function rset(q)
    local r = R[q]
    if not r then
      r = {rows = {}, dirty = {}}
      R[q] = r
    end
    return r
  end
  local function rget(q, a)
    local r = rset(q)
    local v = r.rows[a]
    if v == nil then
      local raw = redis.call('HGET', P .. 'rcpt:' .. q, a)
      v = raw and cjson.decode(raw) or false
      r.rows[a] = v
    end
    return v or nil
  end
  -- Every recipient of q (pickup of a requeued message, expiry), in the hash's order.
  local function rall(q)
    local r = rset(q)
    if not r.complete then
      local all = redis.call('HGETALL', P .. 'rcpt:' .. q)
      local stored = {}
      r.order = {}
      for i = 1, #all, 2 do
        if r.rows[all[i]] == nil then r.rows[all[i]] = cjson.decode(all[i + 1]) end
        r.order[#r.order + 1] = all[i]
        stored[all[i]] = true
      end
      -- recipients added earlier in this batch, not yet written
      local added = {}
      for a in pairs(r.dirty) do
        if not stored[a] then added[#added + 1] = a end
      end
      table.sort(added)
      for _, a in ipairs(added) do r.order[#r.order + 1] = a end
      r.complete = true
    end
    local out = {}
    for _, a in ipairs(r.order) do out[#out + 1] = a end
    return out
  end
  local function rput(q, row)
    local r = rset(q)
    local a = row.address
    if r.rows[a] == nil then rget(q, a) end
    if r.rows[a] == false then
      new_recipients = new_recipients + 1
      if r.order then r.order[#r.order + 1] = a end
    end
    r.rows[a] = row
    r.dirty[a] = true
  end

  local function index(kind, value, q)
    local k = P .. kind .. ':' .. value
    redis.call('SADD', k, q)
    redis.call('EXPIRE', k, MTTL)
  end

  -- The milters' identity filters (docs/milter.md, "identity filter on Redis"):
  -- a message with a new identity is listed in <prefix>open-msgs and the key goes
  -- to the change stream, as record_identity.lua does (written at the end of the
  -- batch: one SADD, one INCRBY for the batch's consecutive seq numbers, then
  -- the stream entries in order).
  local identities = {}  -- {queue id, 'm' or 'f', value} in the order written
  local function identity_written(q, kind, value)
    identities[#identities + 1] = {q, kind == 'mid' and 'm' or 'f', value}
  end

  -- <prefix>fp:<fingerprint> lists only the copies a lookup by content can
  -- match: picked up by the queue manager (state past 'incoming') and not
  -- finished (find_pending.lua; SQLite's messages_fingerprint_queued). A message
  -- joins when it is queued and leaves when it finishes, so the set stays as
  -- small as the queue whatever number of finished messages shared the content.
  local function fp_queued(q)
    local m = mrow(q).row
    if not blank(m.fingerprint) and blank(m.finished) and m.state ~= 'incoming' then index('fp', m.fingerprint, q) end
  end

  local function fp_finished(q)
    local f = mget(q, 'fingerprint')
    if not blank(f) then redis.call('SREM', P .. 'fp:' .. f, q) end
  end

  local function set_identity(q, field, kind, value)
    local old = mget(q, field)
    if old == value then return end
    if not blank(old) then redis.call('SREM', P .. kind .. ':' .. old, q) end
    mput(q, field, value)
    if kind == 'fp' then fp_queued(q) else index(kind, value, q) end
    identity_written(q, kind, value)
  end

  local function finish(q, t)
    mput(q, 'finished', t)
    redis.call('ZADD', P .. 'finished', t, q)
    long(P .. 'finished')
    fp_finished(q)
  end

  local function set_state(q, t, state, finishes)
    msg(q, t)
    if mget(q, 'finished') then return end
    mput(q, 'state', state)
    if finishes then finish(q, t) else fp_queued(q) end
  end

  local function new_rcpt(q, a, d)
    return {queue_id = q, address = a, domain = d, state = 'pending', attempts = '0', first_attempt = '',
            last_attempt = '', first_deferral = '', reply_code = '0', enhanced = '', reply_text = '', stage = '',
            relay = '', category = 'unknown'}
  end

  local DEST_FIELDS = {'kind', 'name', 'last_success', 'last_deferral', 'ep_first', 'ep_last', 'ep_attempts',
                       'ep_messages', 'ep_categories', 'ep_last_reply', 'ep_last_relay', 'updated'}

  -- Written once per batch at the end: a destination's hash fields and its
  -- place in <prefix>dests (a busy destination has many events in a batch).
  local dest_rows = {}    -- dest key -> {row = fields as read or written, written = set of names}
  local dest_scores = {}  -- 'kind\tname' -> latest 'updated'

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
    local q = msg(ev.q, ev.t)
    local first = mget(q, 'first_queue_id')
    local r = rget(q, ev.rcpt) or new_rcpt(q, ev.rcpt, ev.domain)
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
    rput(q, r)
    if ev.outcome == '2' then
      local state = mget(q, 'state')
      if blank(mget(q, 'finished')) and state ~= 'hold' then
        mput(q, 'state', 'deferred')
        if state == 'incoming' then fp_queued(q) end
      end
    end
    if ev.outcome == '2' then
      if ev.domain ~= '' then deferral('domain', ev.domain, first, ev) end
      if ev.relay ~= '' then deferral('relay', ev.relay, first, ev) end
    elseif ev.outcome == '1' then
      if ev.domain ~= '' then success('domain', ev.domain, ev.t) end
      if ev.relay ~= '' then success('relay', ev.relay, ev.t) end
    end
  end

  local function copy(r)
    local c = {}
    for f, v in pairs(r) do c[f] = v end
    return c
  end

  local function pickup(ev)
    local q = msg(ev.q, ev.t)
    mput(q, 'sender', ev.text)
    mput(q, 'arrival', earliest(mget(q, 'arrival'), ev.t))
    if ev.other ~= '' then mput(q, 'previous_queue_id', ev.other) end
    if ev.other == '' or ev.other == ev.q then return end
    -- postsuper -r: the successor inherits identity and still-pending recipients.
    local o = msg(ev.other, ev.t)
    local orow = mrow(o).row
    local nmid, nfp, nsize = mget(q, 'message_id'), mget(q, 'fingerprint'), mget(q, 'size')
    mput(q, 'first_queue_id', orow.first_queue_id)
    if blank(nmid) and not blank(orow.message_id) then set_identity(q, 'message_id', 'mid', orow.message_id) end
    if blank(nfp) and not blank(orow.fingerprint) then set_identity(q, 'fingerprint', 'fp', orow.fingerprint) end
    if not blank(orow.arrival) then mput(q, 'arrival', orow.arrival) end
    if num(nsize) < 0 and orow.size then mput(q, 'size', orow.size) end
    local fin = orow.finished
    mput(o, 'state', 'requeued')
    mput(o, 'next_queue_id', ev.q)
    if blank(fin) then finish(o, ev.t) end
    for _, a in ipairs(rall(o)) do
      local r = rget(o, a)
      if r.state == 'pending' and not rget(q, a) then
        local c = copy(r)
        c.queue_id = ev.q
        rput(q, c)
      end
    end
  end

  local function apply(ev)
    local kind = ev.kind
    if kind == '0' then return end
    if kind == '1' then return pickup(ev) end
    if kind == '4' then return delivery(ev) end
    if kind == '2' then
      local q = msg(ev.q, ev.t)
      if ev.resent == '1' and not blank(mget(q, 'message_id')) then return end
      return set_identity(q, 'message_id', 'mid', ev.text)
    end
    if kind == '3' then
      local q = msg(ev.q, ev.t)
      local arrival, finished = mget(q, 'arrival'), mget(q, 'finished')
      mput(q, 'sender', ev.text)
      mput(q, 'size', ev.size)
      mput(q, 'nrcpt', ev.nrcpt)
      if blank(arrival) then mput(q, 'arrival', ev.t) end
      if blank(finished) then
        mput(q, 'state', 'active')
        fp_queued(q)
      end
      return
    end
    if kind == '10' then
      local q = msg(ev.q, ev.t)
      mput(q, 'arrival', earliest(mget(q, 'arrival'), ev.t))
      return
    end
    if kind == '5' then return set_state(ev.q, ev.t, 'gone', true) end
    if kind == '6' then
      set_state(ev.q, ev.t, 'expired', true)
      for _, a in ipairs(rall(ev.q)) do
        local r = rget(ev.q, a)
        if r.state == 'pending' then
          r.state = 'expired'
          rput(ev.q, r)
        end
      end
      return
    end
    if kind == '7' then return set_state(ev.q, ev.t, 'hold', false) end
    if kind == '8' then return set_state(ev.q, ev.t, 'deferred', false) end
    if kind == '9' then return set_state(ev.q, ev.t, 'rejected', true) end
  end

  -- Replay protection: one ZMSCORE for the batch's keys, one ZADD of the fresh
  -- ones at the end. A key twice in the batch is applied once. Where ZMSCORE is
  -- refused (Redis before 6.2, or an ACL user configured before the ledger used
  -- it: docs/ledger.md, "Running a fleet") each event is checked and recorded
  -- with its own ZADD NX, as before.
  local known = {}
  local per_event = false
  for from = 0, E - 1, 1000 do
    local keys = {}
    for i = from, math.min(E, from + 1000) - 1 do keys[#keys + 1] = ARGV[7 + i * F + 1] end
    local ok, r = pcall(redis.call, 'ZMSCORE', KEYS[1], unpack(keys))
    if not ok then
      per_event = true
      break
    end
    for i = 1, #keys do known[from + i] = r[i] end
  end

  local applied, duplicates = 0, 0
  local fresh = {}
  local journal = {'B'}
  local seen_now = {}
  local seen_args = {}
  for i = 0, E - 1 do
    local b = 7 + i * F
    local key = ARGV[b + 1]
    local dup
    if per_event then
      dup = redis.call('ZADD', KEYS[1], 'NX', ARGV[b + 3], key) == 0
    else
      dup = known[i + 1] or seen_now[key]
    end
    if dup then
      duplicates = duplicates + 1
      fresh[#fresh + 1] = '0'
    else
      seen_now[key] = true
      local ev = {key = key, kind = ARGV[b + 2], t = ARGV[b + 3], q = ARGV[b + 4], other = ARGV[b + 5],
                  text = ARGV[b + 6], resent = ARGV[b + 7], size = ARGV[b + 8], nrcpt = ARGV[b + 9],
                  outcome = ARGV[b + 10], rcpt = ARGV[b + 11], domain = ARGV[b + 12], relay = ARGV[b + 13],
                  code = ARGV[b + 14], enhanced = ARGV[b + 15], reason = ARGV[b + 16], stage = ARGV[b + 17],
                  category = ARGV[b + 18], catbit = ARGV[b + 19], journal = ARGV[b + 20],
                  host = ARGV[b + 21]}
      if not per_event then
        seen_args[#seen_args + 1] = ev.t
        seen_args[#seen_args + 1] = key
      end
      -- the log's host field names the host holding the queue id; it wins over
      -- the name the milter recorded
      if ev.kind ~= '0' and ev.host ~= '' then
        msg(ev.q, ev.t)
        if mget(ev.q, 'host') ~= ev.host then mput(ev.q, 'host', ev.host) end
      end
      apply(ev)
      journal[#journal + 1] = ev.journal
      applied = applied + 1
      fresh[#fresh + 1] = '1'
    end
  end
  -- Variadic commands in chunks of 1000 pairs (unpack has a limit on how many
  -- values it returns).
  local function chunked(cmd, key, args)
    for i = 1, #args, 2000 do redis.call(cmd, key, unpack(args, i, math.min(i + 1999, #args))) end
  end
  chunked('ZADD', KEYS[1], seen_args)
  if #identities > 0 then
    local qs = {}
    for i, id in ipairs(identities) do qs[i] = id[1] end
    for i = 1, #qs, 1000 do redis.call('SADD', P .. 'open-msgs', unpack(qs, i, math.min(i + 999, #qs))) end
    long(P .. 'open-msgs')
    -- INCR per entry where INCRBY is refused (an ACL user configured before the
    -- ledger used it)
    local ok, last = pcall(redis.call, 'INCRBY', P .. 'identities-seq', #identities)
    if not ok then
      for _ = 1, #identities do last = redis.call('INCR', P .. 'identities-seq') end
    end
    local seq = last - #identities
    long(P .. 'identities-seq')
    for _, id in ipairs(identities) do
      seq = seq + 1
      redis.call('XADD', P .. 'identities-stream', 'MAXLEN', '~', 100000, '*', 's', seq, id[2], id[3])
    end
    long(P .. 'identities-stream')
  end
  local msgs_args = {}
  for q, m in pairs(M) do
    local k = P .. 'msg:' .. q
    local args = {}
    for f in pairs(m.dirty) do
      args[#args + 1] = f
      args[#args + 1] = m.row[f]
    end
    if #args > 0 then redis.call('HSET', k, unpack(args)) end
    if m.touched then
      redis.call('EXPIRE', k, MTTL)
      msgs_args[#msgs_args + 1] = m.row.updated
      msgs_args[#msgs_args + 1] = q
    end
  end
  if #msgs_args > 0 then
    chunked('ZADD', P .. 'msgs', msgs_args)
    long(P .. 'msgs')
  end
  for q, r in pairs(R) do
    local k = P .. 'rcpt:' .. q
    local args = {}
    for a in pairs(r.dirty) do
      local row = r.rows[a]
      args[#args + 1] = a
      args[#args + 1] = cjson.encode(row)
      local ak = P .. 'addr:' .. a
      redis.call('ZADD', ak, blank(row.last_attempt) and '0' or row.last_attempt, q)
      redis.call('EXPIRE', ak, MTTL)
    end
    if #args > 0 then
      redis.call('HSET', k, unpack(args))
      redis.call('EXPIRE', k, MTTL)
    end
  end
  if new_recipients > 0 then
    redis.call('HINCRBY', P .. 'counts', 'recipients', new_recipients)
    long(P .. 'counts')
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
end)
collectgarbage('restart')
if not ok then
  -- redis.call raises a table {err = ...} for a command's error reply
  if type(result) == 'table' and result.err then return result end
  return redis.error_reply('ingest: ' .. tostring(result))
end
return result
