-- find_pending.lua -- for each recipient, the oldest earlier copy of a message
-- (same Message-ID or same content fingerprint) still pending in the queue.
-- Read-only.
--
-- KEYS[1]  <prefix>mid:<message_id> (may not exist); KEYS[2] <prefix>fp:<fingerprint> (may not exist;
--          only queued, unfinished copies: ingest.lua keeps it so, and the states are checked again here)
-- ARGV[1]  key prefix; ARGV[2] queue id to exclude ('' = none); then the normalised recipients
-- Returns  a flat array, 13 fields per recipient found: recipient queue_id first_queue_id domain
--          relay last_reply first_deferral last_attempt arrival attempts message_state by_message_id host
--          (times in us as strings, '' when unknown; by_message_id '1' or '0')
local P, exclude = ARGV[1], ARGV[2]
local PENDING = {incoming = true, active = true, deferred = true, hold = true}
local candidates = {}
for slot = 1, 2 do
  for _, q in ipairs(redis.call('SMEMBERS', KEYS[slot])) do
    if q ~= exclude then
      local m = redis.call('HMGET', P .. 'msg:' .. q, 'state', 'first_queue_id', 'arrival', 'host')
      -- by fingerprint: only messages the queue manager has picked up (as SQLite's messages_fingerprint_queued)
      if m[1] and PENDING[m[1]] and (slot == 1 or m[1] ~= 'incoming') then
        table.insert(candidates, {q = q, state = m[1], first = m[2] or q, arrival = m[3] or '', host = m[4] or '',
                                  by_mid = slot == 1})
      end
    end
  end
end
local function key(c, r)
  local a = c.arrival
  if a == '' then a = r.first_deferral end
  if a == '' then return math.huge end
  return tonumber(a)
end
local out = {}
for i = 3, #ARGV do
  local addr = ARGV[i]
  local best, best_r, best_k
  for _, c in ipairs(candidates) do
    local raw = redis.call('HGET', P .. 'rcpt:' .. c.q, addr)
    if raw then
      local r = cjson.decode(raw)
      -- by fingerprint: only a recipient deferred at least once
      if r.state == 'pending' and (c.by_mid or (r.first_deferral or '') ~= '') then
        local k = key(c, r)
        if not best or k < best_k or (k == best_k and c.q < best.q) or (k == best_k and c.q == best.q and c.by_mid and not best.by_mid) then
          best, best_r, best_k = c, r, k
        end
      end
    end
  end
  if best then
    for _, v in ipairs({addr, best.q, best.first, best_r.domain, best_r.relay, best_r.reply_text,
                        best_r.first_deferral, best_r.last_attempt, best.arrival, best_r.attempts, best.state,
                        best.by_mid and '1' or '0', best.host}) do
      table.insert(out, v)
    end
  end
end
return out
