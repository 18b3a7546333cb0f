-- set_destination_state.lua -- the rules engine sets a destination's ladder state.
--
-- KEYS[1]  <prefix>dest:<kind>:<name>
-- ARGV[1]  key prefix; ARGV[2] TTL of long-lived keys (s); ARGV[3] kind; ARGV[4] name;
-- ARGV[5]  state; ARGV[6] time (us)
-- Returns  1
local P, KTTL, kind, name, state, t = ARGV[1], tonumber(ARGV[2]), ARGV[3], ARGV[4], ARGV[5], ARGV[6]
local k = KEYS[1]
local u = redis.call('HGET', k, 'updated')
if not u or u == '' or tonumber(t) > tonumber(u) then u = t end
redis.call('HSET', k, 'kind', kind, 'name', name, 'state', state, 'state_changed', t, 'updated', u)
redis.call('EXPIRE', k, KTTL)
redis.call('ZADD', P .. 'dests', u, kind .. '\t' .. name)
redis.call('EXPIRE', P .. 'dests', KTTL)
return 1
