-- verdict_effects.lua -- apply the ledger effects of rules-engine verdicts at most once.
-- Effects whose seq is at or below the stored high-water mark were applied before
-- (a replay after a crash) and are skipped; the mark rises to the highest seq.
-- The verdict outbox: the line of every effect applied now is added (member
-- "seq<TAB>at<TAB>line", score seq), and entries up to the caller's last
-- written seq are removed, in the same call.
--
-- KEYS[1]  <prefix>verdictmark (integer); KEYS[2] <prefix>outbox (sorted set)
-- ARGV[1]  key prefix; ARGV[2] TTL of long-lived keys (s);
-- ARGV[3]  outbox seq written by the caller (entries <= it are removed)
-- ARGV[4]  number of effects N, then N groups of 10 fields:
--          seq verdict action kind name state at reason expires_at line
--          (action: 0 none, 1 destination state, 2 set flag, 3 clear flags;
--          times in microseconds, expires_at '' for never, line '' for none)
-- Returns  the mark before this call
local P, KTTL = ARGV[1], tonumber(ARGV[2])
local N = tonumber(ARGV[4])
local F = 10
if not N or #ARGV ~= 4 + N * F then return redis.error_reply('verdict_effects: bad argument count') end
if tonumber(ARGV[3]) > 0 then redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', ARGV[3]) end
local before = tonumber(redis.call('GET', KEYS[1]) or '0')
local mark = before
local counts = {}
local lines = false
for i = 0, N - 1 do
  local b = 4 + i * F
  local seq, verdict, action = tonumber(ARGV[b + 1]), ARGV[b + 2], ARGV[b + 3]
  local kind, name, state, t = ARGV[b + 4], ARGV[b + 5], ARGV[b + 6], ARGV[b + 7]
  if seq > before then
    if seq > mark then mark = seq end
    counts[verdict] = (counts[verdict] or 0) + 1
    if ARGV[b + 10] ~= '' then
      redis.call('ZADD', KEYS[2], seq, ARGV[b + 1] .. '\t' .. t .. '\t' .. ARGV[b + 10])
      lines = true
    end
    if action == '1' then
      local k = P .. 'dest:' .. kind .. ':' .. name
      local u = redis.call('HGET', k, 'updated')
      if not u or u == '' or tonumber(t) > tonumber(u) then u = t end
      redis.call('HSET', k, 'kind', kind, 'name', name, 'state', state, 'state_changed', t, 'updated', u)
      redis.call('EXPIRE', k, KTTL)
      redis.call('ZADD', P .. 'dests', u, kind .. '\t' .. name)
      redis.call('EXPIRE', P .. 'dests', KTTL)
    elseif action == '2' then
      local id = redis.call('INCR', P .. 'flagseq')
      redis.call('HSET', P .. 'flags', tostring(id), cjson.encode({id = tostring(id), destination = name,
        reason = ARGV[b + 8], set_at = t, expires_at = ARGV[b + 9], cleared_at = ''}))
      redis.call('EXPIRE', P .. 'flags', KTTL)
      redis.call('EXPIRE', P .. 'flagseq', KTTL)
    elseif action == '3' then
      local all = redis.call('HGETALL', P .. 'flags')
      local now = tonumber(t)
      for j = 1, #all, 2 do
        local f = cjson.decode(all[j + 1])
        if f.destination == name and f.cleared_at == '' and (f.expires_at == '' or tonumber(f.expires_at) > now) then
          f.cleared_at = t
          redis.call('HSET', P .. 'flags', all[j], cjson.encode(f))
        end
      end
    end
  end
end
for verdict, n in pairs(counts) do redis.call('HINCRBY', P .. 'verdicts', verdict, n) end
if next(counts) then redis.call('EXPIRE', P .. 'verdicts', KTTL) end
if lines then redis.call('EXPIRE', KEYS[2], KTTL) end
if mark ~= before then
  redis.call('SET', KEYS[1], string.format('%.0f', mark))
  redis.call('EXPIRE', KEYS[1], KTTL)
end
return before
