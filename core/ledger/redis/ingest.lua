-- ingest.lua -- apply one batch of log events and the follower position atomically
-- (Redis runs a script to completion or not at all, so a client killed mid-batch
-- leaves either the whole batch with its position or neither).
--
-- KEYS[1]  <prefix>seen: sorted set of event keys written by builds before the
--          per-hour seen sets (read for replays while it exists, never written)
-- ARGV[1]  key prefix; every other key is <prefix>... (one Redis server, not Redis Cluster)
-- ARGV[2]  TTL of per-message keys, seconds
-- ARGV[3]  TTL of long-lived keys (destinations, history, indexes), seconds
-- ARGV[4]  TTL of the seen sets, seconds
-- ARGV[5]  follower source id, '' for none
-- ARGV[6]  follower position, JSON stored verbatim under <prefix>pos
-- ARGV[7]  number of events E
-- ARGV[8]  the E events as one MessagePack array of E arrays of 21 values (one
--          argument for the batch: Redis makes an object and Lua an interned
--          string of every argument, which cost a third of a fresh event when
--          each field was an argument of its own), in this order:
--            1 key  2 kind  3 time  4 queue_id  5 other_id  6 text  7 resent
--            8 size  9 nrcpt  10 outcome  11 recipient  12 domain  13 relay
--            14 code  15 enhanced  16 reason  17 stage  18 category
--            19 category_bit  20 journal  21 host
--          (all strings but journal; kind and outcome numbers: OpKind and Outcome in
--          core/ledger/internal.hpp; times: microseconds since the epoch, as decimal
--          strings; journal: the length, a number, of the event's part in ARGV[9])
-- ARGV[9]  the events' parts of the engine journal batch entry, one after the
--          other; the fresh events' parts are kept
-- Returns  {applied, duplicates, fresh, journal_seq} (fresh: a string of '1'/'0',
--          one per event; journal_seq: the seq of the journal entry 'B' .. the fresh
--          events' parts, appended to <prefix>journal; 0 when none was fresh)
-- XADD '*' and SSCAN are not deterministic: Redis 5 and 6 then need effects
-- replication (Redis 7 always uses it; the call is a no-op there).
--
-- The batch's rows are read once and written once: a message's hash and its
-- recipients are loaded on first use into Lua tables, changed there, and
-- written back with one HSET each at the end (the script is atomic, so nobody
-- sees the state in between); the replay check is one SMISMEMBER and one SADD
-- per hour of the batch. Per event only the sets and streams that must change are
-- touched.
if redis.replicate_commands then redis.replicate_commands() end
local P = ARGV[1]
local MTTL, KTTL, STTL = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local E = tonumber(ARGV[7])
if not E or #ARGV ~= 9 then return redis.error_reply('ingest: bad argument count') end
local unpacked, events = pcall(cmsgpack.unpack, ARGV[8])
if not unpacked or type(events) ~= 'table' or #events ~= E then return redis.error_reply('ingest: bad event list') end
local J = ARGV[9]
local jtotal = 0
for i = 1, E do
  if type(events[i]) ~= 'table' or #events[i] ~= 21 or type(events[i][20]) ~= 'number' then
    return redis.error_reply('ingest: bad event list')
  end
  jtotal = jtotal + events[i][20]
end
if jtotal ~= #J then return redis.error_reply('ingest: bad journal parts') end
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
  -- Entries are found by kind, then name, and carry their key names, so a
  -- busy destination's events build no strings.
  local dest_rows = {domain = {}, relay = {}}  -- kind -> name -> entry
  local dest_list = {}                         -- the entries, in first-use order

  -- A destination's hash, read once per batch (missing fields read as false).
  local function dest(kind, name)
    local e = dest_rows[kind][name]
    if not e then
      local dk = P .. 'dest:' .. kind .. ':' .. name
      local v = redis.call('HMGET', dk, unpack(DEST_FIELDS))
      local row = {}
      for i, f in ipairs(DEST_FIELDS) do row[f] = v[i] end
      e = {row = row, dk = dk, mk = P .. 'destmsg:' .. kind .. ':' .. name, m = kind .. '\t' .. name}
      dest_rows[kind][name] = e
      dest_list[#dest_list + 1] = e
    end
    return e
  end

  local function deferral(kind, name, first, ev)
    local e = dest(kind, name)
    local fresh = redis.call('SADD', e.mk, first)
    long(e.mk)
    local d = e.row
    if blank(d.ep_first) then
      d.ep_first = ev[3]
      redis.call('SADD', P .. 'open', e.m)
      long(P .. 'open')
    end
    d.kind = kind
    d.name = name
    d.last_deferral = latest(d.last_deferral, ev[3])
    d.ep_last = latest(d.ep_last, ev[3])
    d.ep_attempts = tostring(num(d.ep_attempts) + 1)
    d.ep_messages = tostring(num(d.ep_messages) + fresh)
    d.ep_categories = tostring(bit.bor(num(d.ep_categories), num(ev[19])))
    d.ep_last_reply = ev[16]
    d.ep_last_relay = ev[13]
    d.updated = latest(d.updated, ev[3])
  end

  local function success(kind, name, t)
    local e = dest(kind, name)
    local d = e.row
    if not blank(d.ep_first) then
      local id = redis.call('HINCRBY', P .. 'counts', 'episode_ids', 1)
      redis.call('HINCRBY', P .. 'counts', 'episodes', 1)
      local ep = cjson.encode({id = tostring(id), first = d.ep_first, last = d.ep_last, ended = t,
                               attempts = d.ep_attempts, messages = d.ep_messages, categories = d.ep_categories,
                               last_reply = d.ep_last_reply, last_relay = d.ep_last_relay})
      local ek = P .. 'eps:' .. kind .. ':' .. name
      redis.call('ZADD', ek, t, ep)
      long(ek)
      redis.call('ZADD', P .. 'epsidx', 'NX', t, e.m)
      long(P .. 'epsidx')
      redis.call('DEL', e.mk)
      redis.call('SREM', P .. 'open', e.m)
    end
    d.kind = kind
    d.name = name
    d.last_success = latest(d.last_success, t)
    d.ep_first = ''
    d.ep_last = ''
    d.ep_attempts = '0'
    d.ep_messages = '0'
    d.ep_categories = '0'
    d.ep_last_reply = ''
    d.ep_last_relay = ''
    d.updated = latest(d.updated, t)
  end

  local OUTCOME = {['1'] = 'sent', ['2'] = 'pending', ['3'] = 'bounced', ['4'] = 'expired'}

  local function delivery(ev)
    local q = msg(ev[4], ev[3])
    local first = mget(q, 'first_queue_id')
    local r = rget(q, ev[11]) or new_rcpt(q, ev[11], ev[12])
    r.state = OUTCOME[ev[10]]
    r.attempts = tostring(num(r.attempts) + 1)
    r.first_attempt = earliest(r.first_attempt, ev[3])
    r.last_attempt = latest(r.last_attempt, ev[3])
    if ev[10] == '2' and blank(r.first_deferral) then r.first_deferral = ev[3] end
    r.reply_code = ev[14]
    r.enhanced = ev[15]
    r.reply_text = ev[16]
    r.stage = ev[17]
    r.relay = ev[13]
    r.category = ev[18]
    rput(q, r)
    if ev[10] == '2' then
      local state = mget(q, 'state')
      if blank(mget(q, 'finished')) and state ~= 'hold' then
        mput(q, 'state', 'deferred')
        if state == 'incoming' then fp_queued(q) end
      end
    end
    if ev[10] == '2' then
      if ev[12] ~= '' then deferral('domain', ev[12], first, ev) end
      if ev[13] ~= '' then deferral('relay', ev[13], first, ev) end
    elseif ev[10] == '1' then
      if ev[12] ~= '' then success('domain', ev[12], ev[3]) end
      if ev[13] ~= '' then success('relay', ev[13], ev[3]) end
    end
  end

  local function copy(r)
    local c = {}
    for f, v in pairs(r) do c[f] = v end
    return c
  end

  local function pickup(ev)
    local q = msg(ev[4], ev[3])
    mput(q, 'sender', ev[6])
    mput(q, 'arrival', earliest(mget(q, 'arrival'), ev[3]))
    if ev[5] ~= '' then mput(q, 'previous_queue_id', ev[5]) end
    if ev[5] == '' or ev[5] == ev[4] then return end
    -- postsuper -r: the successor inherits identity and still-pending recipients.
    local o = msg(ev[5], ev[3])
    local orow = mrow(o).row
    local nmid, nfp, nsize = mget(q, 'message_id'), mget(q, 'fingerprint'), mget(q, 'size')
    mput(q, 'first_queue_id', orow.first_queue_id)
    if blank(nmid) and not blank(orow.message_id) then set_identity(q, 'message_id', 'mid', orow.message_id) end
    if blank(nfp) and not blank(orow.fingerprint) then set_identity(q, 'fingerprint', 'fp', orow.fingerprint) end
    if not blank(orow.arrival) then mput(q, 'arrival', orow.arrival) end
    if num(nsize) < 0 and orow.size then mput(q, 'size', orow.size) end
    local fin = orow.finished
    mput(o, 'state', 'requeued')
    mput(o, 'next_queue_id', ev[4])
    if blank(fin) then finish(o, ev[3]) end
    local deferred = false
    for _, a in ipairs(rall(o)) do
      local r = rget(o, a)
      if r.state == 'pending' and not rget(q, a) then
        local c = copy(r)
        c.queue_id = ev[4]
        rput(q, c)
        if not blank(c.first_deferral) then deferred = true end
      end
    end
    -- a successor that carries deferred recipients is a copy the queue is
    -- retrying from its first line on, before its next attempt is logged
    if deferred and mget(q, 'state') == 'incoming' and blank(mget(q, 'finished')) then
      mput(q, 'state', 'deferred')
      fp_queued(q)
    end
  end

  local function apply(ev)
    local kind = ev[2]
    if kind == '0' then return end
    if kind == '1' then return pickup(ev) end
    if kind == '4' then return delivery(ev) end
    if kind == '2' then
      local q = msg(ev[4], ev[3])
      if ev[7] == '1' and not blank(mget(q, 'message_id')) then return end
      return set_identity(q, 'message_id', 'mid', ev[6])
    end
    if kind == '3' then
      local q = msg(ev[4], ev[3])
      local arrival, finished = mget(q, 'arrival'), mget(q, 'finished')
      mput(q, 'sender', ev[6])
      mput(q, 'size', ev[8])
      mput(q, 'nrcpt', ev[9])
      if blank(arrival) then mput(q, 'arrival', ev[3]) end
      if blank(finished) then
        mput(q, 'state', 'active')
        fp_queued(q)
      end
      return
    end
    if kind == '10' then
      local q = msg(ev[4], ev[3])
      mput(q, 'arrival', earliest(mget(q, 'arrival'), ev[3]))
      return
    end
    if kind == '5' then return set_state(ev[4], ev[3], 'gone', true) end
    if kind == '6' then
      set_state(ev[4], ev[3], 'expired', true)
      for _, a in ipairs(rall(ev[4])) do
        local r = rget(ev[4], a)
        if r.state == 'pending' then
          r.state = 'expired'
          rput(ev[4], r)
        end
      end
      return
    end
    if kind == '7' then return set_state(ev[4], ev[3], 'hold', false) end
    if kind == '8' then return set_state(ev[4], ev[3], 'deferred', false) end
    if kind == '9' then return set_state(ev[4], ev[3], 'rejected', true) end
  end

  -- Replay protection: event keys live in one set per hour of event time,
  -- <prefix>seen:<hour> (hour = time / 3600 s), listed in <prefix>seen-hours
  -- (score and member: the hour) for prune.lua and the statistics. A key's
  -- time is part of the key, so a replayed event always meets its own hour's
  -- set. One SMISMEMBER per hour of the batch, one SADD of the fresh keys per
  -- hour at the end; a key twice in the batch is applied once. Where SMISMEMBER
  -- is refused (Redis before 6.2, or an ACL user configured before the ledger
  -- used it: docs/ledger.md, "Running a fleet") each event is checked and
  -- recorded with its own SADD.
  local HOUR = 3600000000
  local hour_of, by_hour = {}, {}
  for i = 1, E do
    local h = tostring(math.floor(num(events[i][3]) / HOUR))
    hour_of[i] = h
    local list = by_hour[h]
    if not list then
      list = {}
      by_hour[h] = list
    end
    list[#list + 1] = i
  end
  local known = {}
  local per_event = false
  for h, list in pairs(by_hour) do
    for from = 1, #list, 1000 do
      local keys = {}
      for j = from, math.min(#list, from + 999) do keys[#keys + 1] = events[list[j]][1] end
      local ok, r = pcall(redis.call, 'SMISMEMBER', P .. 'seen:' .. h, unpack(keys))
      if not ok then
        per_event = true
        break
      end
      for j = 1, #keys do
        if r[j] == 1 then known[list[from + j - 1]] = true end
      end
    end
    if per_event then break end
  end
  -- Keys recorded by a build before the per-hour sets are in the sorted set
  -- KEYS[1], which is read while it exists (it is no longer written: its TTL
  -- and prune.lua remove it).
  if redis.call('ZCARD', KEYS[1]) > 0 then
    for from = 1, E, 1000 do
      local keys = {}
      for i = from, math.min(E, from + 999) do keys[#keys + 1] = events[i][1] end
      local ok, r = pcall(redis.call, 'ZMSCORE', KEYS[1], unpack(keys))
      for j = 1, #keys do
        local i = from + j - 1
        if ok then
          if r[j] then known[i] = true end
        elseif redis.call('ZADD', KEYS[1], 'XX', 'INCR', 0, keys[j]) then
          known[i] = true  -- XX INCR 0: the member's score when present, nothing added
        end
      end
    end
  end

  local applied, duplicates = 0, 0
  local fresh = {}
  local journal = {'B'}
  local seen_now = {}
  local seen_new = {}  -- hour -> fresh keys to add at the end
  -- The fresh events' journal parts are cut from ARGV[9] a run of consecutive
  -- fresh events at a time (the whole of it when none is a duplicate).
  local jpos, run_from = 1, nil
  for i = 1, E do
    local ev = events[i]
    local jnext = jpos + ev[20]
    local key = ev[1]
    local h = hour_of[i]
    local dup
    if per_event then
      dup = redis.call('SADD', P .. 'seen:' .. h, key) == 0 or known[i]
      if not seen_new[h] then seen_new[h] = {} end
    else
      dup = known[i] or seen_now[key]
    end
    if dup then
      duplicates = duplicates + 1
      fresh[#fresh + 1] = '0'
      if run_from then
        journal[#journal + 1] = string.sub(J, run_from, jpos - 1)
        run_from = nil
      end
    else
      seen_now[key] = true
      if not run_from then run_from = jpos end
      if not per_event then
        local list = seen_new[h]
        if not list then
          list = {}
          seen_new[h] = list
        end
        list[#list + 1] = key
      end
      -- the log's host field names the host holding the queue id; it wins over
      -- the name the milter recorded
      if ev[2] ~= '0' and ev[21] ~= '' then
        msg(ev[4], ev[3])
        if mget(ev[4], 'host') ~= ev[21] then mput(ev[4], 'host', ev[21]) end
      end
      apply(ev)
      applied = applied + 1
      fresh[#fresh + 1] = '1'
    end
    jpos = jnext
  end
  if run_from then journal[#journal + 1] = string.sub(J, run_from, jpos - 1) end
  -- Variadic commands in chunks of 1000 pairs (unpack has a limit on how many
  -- values it returns).
  local function chunked(cmd, key, args)
    for i = 1, #args, 2000 do redis.call(cmd, key, unpack(args, i, math.min(i + 1999, #args))) end
  end
  -- An hour's set lives seen_ttl past its last write, and one hour longer so
  -- that its last keys get the whole seen_ttl.
  local hour_args = {}
  for h, keys in pairs(seen_new) do
    local k = P .. 'seen:' .. h
    for i = 1, #keys, 1000 do redis.call('SADD', k, unpack(keys, i, math.min(i + 999, #keys))) end
    redis.call('EXPIRE', k, STTL + 3600)
    hour_args[#hour_args + 1] = h
    hour_args[#hour_args + 1] = h
  end
  if #hour_args > 0 then
    chunked('ZADD', P .. 'seen-hours', hour_args)
    redis.call('EXPIRE', P .. 'seen-hours', STTL + 3600)
  end
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
  -- Every destination of the batch had a deferral or a success: all its
  -- fields that hold a value are written (those the batch did not change are
  -- written as read).
  for _, e in ipairs(dest_list) do
    local args = {}
    for _, f in ipairs(DEST_FIELDS) do
      local v = e.row[f]
      if v then
        args[#args + 1] = f
        args[#args + 1] = v
      end
    end
    redis.call('HSET', e.dk, unpack(args))
    redis.call('EXPIRE', e.dk, KTTL)
    redis.call('ZADD', P .. 'dests', e.row.updated, e.m)
  end
  if #dest_list > 0 then long(P .. 'dests') end
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
